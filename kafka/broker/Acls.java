// The ACLs of `make up SECURE=1` and the tests' secure broker (issue 53 item 7), created with
// Kafka's own Admin client (kafka-clients, in the broker's jars; Kafka 4 moved the kafka-acls
// tool into a jar the broker does not need). Run as a single-file program:
//
//   java -cp "$(scripts/stack.sh broker-lib)/*" kafka/broker/Acls.java BOOTSTRAP ADMIN.properties PREFIX
//
// Only the relay's user may write the events topics (PREFIX...): a process that reads the log
// (the projections, the API) cannot put an event on it. Both may create and describe them (each
// checks the topic's configuration at start); readers read them and their consumer groups
// (named after the topic).
import java.io.FileReader;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

public class Acls {
    static AclBinding allow(ResourceType type, String prefix, String user, AclOperation op) {
        return new AclBinding(
                new ResourcePattern(type, prefix, PatternType.PREFIXED),
                new AccessControlEntry("User:" + user, "*", op, AclPermissionType.ALLOW));
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (FileReader r = new FileReader(args[1])) {
            props.load(r);
        }
        props.put("bootstrap.servers", args[0]);
        String prefix = args[2];
        List<AclBinding> acls = List.of(
                allow(ResourceType.TOPIC, prefix, "onsale-relay", AclOperation.WRITE),
                allow(ResourceType.TOPIC, prefix, "onsale-relay", AclOperation.CREATE),
                allow(ResourceType.TOPIC, prefix, "onsale-relay", AclOperation.DESCRIBE),
                allow(ResourceType.TOPIC, prefix, "onsale-relay", AclOperation.DESCRIBE_CONFIGS),
                allow(ResourceType.TOPIC, prefix, "onsale-node", AclOperation.READ),
                allow(ResourceType.TOPIC, prefix, "onsale-node", AclOperation.CREATE),
                allow(ResourceType.TOPIC, prefix, "onsale-node", AclOperation.DESCRIBE),
                allow(ResourceType.TOPIC, prefix, "onsale-node", AclOperation.DESCRIBE_CONFIGS),
                allow(ResourceType.GROUP, prefix, "onsale-node", AclOperation.READ));
        try (Admin admin = Admin.create(props)) {
            admin.createAcls(acls).all().get();
        }
        System.out.println("kafka acls: " + acls.size() + " on " + prefix + "*");
    }
}
