# shellcheck shell=bash
# scripts/stack.sh's The secure pair: a CA and certificates, a broker taking only SASL_SSL with its ACLs, a Redis taking only TLS (ADR 032).
# Sourced by scripts/stack.sh, whose settings (ROOT, CACHE, the ports) it reads.

# --- Kafka and Redis over TLS with credentials (`up SECURE=1`, the tests' secure pair; issue
# 53 item 7). DIR/tls: a CA of its own and a certificate for 127.0.0.1 and localhost signed by
# it; DIR/secure.env: the users' passwords (random, mode 600), sourced by the functions below.
secure_material() {
  local dir=$1 tls=$1/tls
  [ -f "$dir/secure.env" ] && return 0
  ensure_packages
  mkdir -p "$tls"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=onsale local CA" \
    -keyout "$tls/ca.key" -out "$tls/ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$tls/server.key" -out "$tls/server.csr" 2>/dev/null
  printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=CA:FALSE" \
    "keyUsage=digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" >"$tls/server.ext"
  openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial \
    -days 30 -extfile "$tls/server.ext" -out "$tls/server.pem" 2>/dev/null
  # Kafka's PEM key store: the key (PKCS#8) and its certificate in one file.
  cat "$tls/server.key" "$tls/server.pem" >"$tls/broker.pem"
  chmod 600 "$tls"/*.key "$tls/broker.pem"
  (umask 077 && {
    echo "KAFKA_ADMIN_PASSWORD=$(openssl rand -hex 16)"
    echo "KAFKA_RELAY_PASSWORD=$(openssl rand -hex 16)"
    echo "KAFKA_NODE_PASSWORD=$(openssl rand -hex 16)"
    echo "REDIS_PASSWORD=$(openssl rand -hex 16)"
  } >"$dir/secure.env")
}

# The ACLs of a secure broker (kafka/broker/Acls.java): only onsale-relay writes the topics
# whose names start with PREFIX; onsale-node reads them.
kafka_acls() {
  local secure=$1 bootstrap=$2 prefix=$3 lib
  lib=$(broker_lib)
  # shellcheck disable=SC1091
  . "$secure/secure.env"
  (umask 077 && cat >"$secure/admin.properties" <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$KAFKA_ADMIN_PASSWORD";
ssl.truststore.type=PEM
ssl.truststore.location=$secure/tls/ca.pem
PROPS
  )
  java -Dlog4j2.configurationFile="$ROOT/kafka/broker/log4j2.properties" -cp "$lib/*" \
    "$ROOT/kafka/broker/Acls.java" "$bootstrap" "$secure/admin.properties" "$prefix"
}

# A broker (SASL_SSL, SCRAM users admin, onsale-relay, onsale-node, ACLs on the onsale.events
# topics) on KAFKA_PORT and a Redis (TLS only, user onsale) on REDIS_PORT, both in DIR; prints
# what a client needs as NAME=VALUE lines (also in DIR/client.env).
secure_up() {
  local dir=$1 kport=$2 rport=$3
  secure_material "$dir"
  KAFKA_SECURE=$dir broker_up "$dir" "$kport" 1 >/dev/null
  kafka_acls "$dir" "127.0.0.1:$kport" onsale.events >/dev/null
  REDIS_SECURE=$dir redis_up "$dir" "$rport" >/dev/null
  # shellcheck disable=SC1091
  . "$dir/secure.env"
  (umask 077 && {
    echo "KAFKA_BROKERS=127.0.0.1:$kport"
    echo "KAFKA_CA_FILE=$dir/tls/ca.pem"
    echo "KAFKA_RELAY_PASSWORD=$KAFKA_RELAY_PASSWORD"
    echo "KAFKA_NODE_PASSWORD=$KAFKA_NODE_PASSWORD"
    echo "KAFKA_ADMIN_PASSWORD=$KAFKA_ADMIN_PASSWORD"
    echo "REDIS_URL=rediss://onsale:$REDIS_PASSWORD@127.0.0.1:$rport/"
    echo "REDIS_CA_FILE=$dir/tls/ca.pem"
  } >"$dir/client.env")
  cat "$dir/client.env"
}
