//! The unit tests of `auth.rs`.

use super::*;

const KEY: &str = "a-test-secret-of-at-least-32-bytes!";

/// A fan's claims for ten minutes, as `f` changes them.
fn fan_claims(f: impl FnOnce(&mut Claims)) -> Claims {
    let now = now_secs();
    let mut c = Claims {
        sub: "fan-1".into(),
        role: Role::Fan,
        iss: DEFAULT_ISSUER.into(),
        aud: DEFAULT_AUDIENCE.into(),
        iat: now,
        exp: now + 600,
        nbf: None,
        verified: false,
        venue: None,
        shows: None,
    };
    f(&mut c);
    c
}

fn claims(f: impl FnOnce(&mut Claims)) -> String {
    encode_claims(KEY, &fan_claims(f)).expect("signs")
}

fn refused(token: &str) -> ApiError {
    let e = Verifier::with_defaults(KEY)
        .verify(token)
        .expect_err("the token is refused");
    assert_eq!(e.status, StatusCode::UNAUTHORIZED);
    assert_eq!(e.code, ErrorCode::Unauthenticated);
    assert_eq!(e.detail, "the bearer token is not valid", "no library text");
    e
}

#[test]
fn a_token_of_the_right_issuer_and_audience_is_accepted() {
    let c = Verifier::with_defaults(KEY)
        .verify(&claims(|_| {}))
        .expect("accepted");
    assert_eq!(c.role, Role::Fan);
    assert_eq!(c.account.as_str(), "fan-1");
    assert!(!c.verified, "no claim: not verified");
    let v = Verifier::with_defaults(KEY)
        .verify(&claims(|c| c.verified = true))
        .expect("accepted");
    assert!(v.verified);
}

#[test]
fn issuer_audience_signature_time_and_lifetime_are_checked() {
    refused(&claims(|c| c.iss = "someone-else".into()));
    refused(&claims(|c| c.aud = "another-api".into()));
    refused(&claims(|c| c.nbf = Some(now_secs() + 600)));
    refused(&claims(|c| c.exp = now_secs() - 120));
    refused(&claims(|c| c.exp = c.iat + DEFAULT_MAX_LIFETIME_SECS + 1));
    refused(&claims(|c| {
        c.iat = now_secs() + 3_600;
        c.exp = c.iat + 60;
    }));
    refused(
        &mint(
            "another-secret-of-at-least-32-bytes",
            "fan-1",
            Role::Fan,
            60,
        )
        .expect("signs"),
    );
    refused("not.a.token");
}

#[test]
fn a_token_without_issuer_audience_or_issue_time_is_refused() {
    let now = now_secs();
    for body in [
        serde_json::json!({"sub": "fan-1", "role": "fan", "exp": now + 60}),
        serde_json::json!({"sub": "fan-1", "role": "fan", "aud": DEFAULT_AUDIENCE, "iat": now, "exp": now + 60}),
        serde_json::json!({"sub": "fan-1", "role": "fan", "iss": DEFAULT_ISSUER, "iat": now, "exp": now + 60}),
        serde_json::json!({"sub": "fan-1", "role": "fan", "iss": DEFAULT_ISSUER, "aud": DEFAULT_AUDIENCE, "exp": now + 60}),
    ] {
        let t = encode(
            &Header::new(Algorithm::HS256),
            &body,
            &EncodingKey::from_secret(KEY.as_bytes()),
        )
        .expect("signs");
        refused(&t);
    }
}

/// An Ed25519 key: its signing key for tokens and its public JWK.
fn ed25519(kid: &str) -> (EncodingKey, serde_json::Value) {
    use base64::Engine as _;
    use ring::signature::KeyPair as _;
    let doc = ring::signature::Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new())
        .expect("a key");
    let pair = ring::signature::Ed25519KeyPair::from_pkcs8(doc.as_ref()).expect("parsed");
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(pair.public_key().as_ref());
    (
        EncodingKey::from_ed_der(doc.as_ref()),
        serde_json::json!({"kty": "OKP", "crv": "Ed25519", "x": x, "kid": kid, "alg": "EdDSA", "use": "sig"}),
    )
}

fn signed(key: &EncodingKey, kid: &str, f: impl FnOnce(&mut Claims)) -> String {
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some(kid.into());
    encode(&header, &fan_claims(f), key).expect("signs")
}

/// A JWKS served over HTTP, whose keys the test changes as a provider rotates them.
async fn provider(keys: Arc<RwLock<Vec<serde_json::Value>>>) -> String {
    let app = axum::Router::new().route(
        "/jwks",
        axum::routing::get(move || {
            let keys = keys.read().expect("keys").clone();
            async move { axum::Json(serde_json::json!({ "keys": keys })) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/jwks")
}

#[tokio::test]
async fn a_providers_keys_are_taken_as_they_rotate_and_a_retired_one_is_refused() {
    let (one, one_jwk) = ed25519("one");
    let (two, two_jwk) = ed25519("two");
    let served = Arc::new(RwLock::new(vec![one_jwk]));
    let jwks = Jwks::new(&provider(served.clone()).await);
    let v = Verifier::new(
        None,
        Some(jwks.clone()),
        None,
        DEFAULT_ISSUER,
        DEFAULT_AUDIENCE,
        86_400,
        3_600,
    );
    assert!(
        v.verify(&signed(&one, "one", |_| {})).is_err(),
        "no key fetched yet"
    );
    assert_eq!(jwks.refresh().await.expect("fetched"), 1);
    let by_one = signed(&one, "one", |_| {});
    assert_eq!(
        v.verify(&by_one).expect("one's token").account.as_str(),
        "fan-1"
    );
    // The provider adds a key and signs with it: taken at the first token naming it.
    served.write().expect("keys").insert(0, two_jwk);
    let by_two = signed(&two, "two", |_| {});
    assert!(
        v.verify(&by_two).is_err(),
        "not fetched without a fresh check"
    );
    v.verify_fresh(&by_two)
        .await
        .expect("a new key is taken at once");
    v.verify(&by_one)
        .expect("the old key is honoured while it is in the set");
    // A kid under another key's name, or made up, is refused (and refetches at most every 10 s).
    assert!(v.verify_fresh(&signed(&two, "one", |_| {})).await.is_err());
    assert!(v
        .verify_fresh(&signed(&two, "made-up", |_| {}))
        .await
        .is_err());
    // The old key leaves the set: refused from the next fetch.
    served.write().expect("keys").truncate(1);
    jwks.refresh().await.expect("fetched");
    assert!(v.verify(&by_one).is_err(), "a retired key's token");
    v.verify(&by_two).expect("the new key's");
    // A shared-secret token is refused where no secret is configured (outside development).
    assert!(
        v.verify(&claims(|_| {})).is_err(),
        "HS256 without a shared secret"
    );
}

#[test]
fn only_signing_keys_of_the_accepted_algorithms_with_a_kid_are_taken_from_a_set() {
    let (_, ed) = ed25519("ed");
    let mut no_kid = ed.clone();
    no_kid.as_object_mut().expect("object").remove("kid");
    let mut for_encryption = ed.clone();
    for_encryption["kid"] = "enc".into();
    for_encryption["use"] = "enc".into();
    let mut wrong_alg = ed.clone();
    wrong_alg["kid"] = "wrong".into();
    wrong_alg["alg"] = "RS256".into();
    let mut implied = ed.clone();
    implied["kid"] = "implied".into();
    implied.as_object_mut().expect("object").remove("alg");
    let doc = serde_json::json!({"keys": [
        ed, no_kid, for_encryption, wrong_alg, implied,
        {"kty": "oct", "k": "c2VjcmV0", "kid": "shared", "alg": "HS256"},
        {"kty": "unknown", "kid": "odd"},
        "not a key",
    ]});
    let mut kids: Vec<String> = parse_jwks(&doc).into_keys().collect();
    kids.sort();
    assert_eq!(kids, ["ed", "implied"]);
}

#[test]
fn an_admins_token_lives_an_hour_at_most_and_a_scanners_names_its_gates() {
    let v = Verifier::with_defaults(KEY);
    let two_hours = |role| {
        claims(|c| {
            c.role = role;
            c.exp = c.iat + 7_200;
        })
    };
    v.verify(&two_hours(Role::Fan)).expect("a fan's two hours");
    refused(&two_hours(Role::Admin));
    v.verify(&claims(|c| {
        c.role = Role::Admin;
        c.exp = c.iat + 3_600;
    }))
    .expect("an admin's hour");
    refused(&claims(|c| c.role = Role::Scanner));
    let gated = v
        .verify(&claims(|c| {
            c.role = Role::Scanner;
            c.shows = Some(vec!["s1".into()]);
        }))
        .expect("a scanner with its shows");
    assert_eq!(gated.gates, Some(Gates::Shows(vec!["s1".into()])));
    assert!(Gates::Shows(vec!["s1".into()]).admit("s1", "v9"));
    assert!(!Gates::Shows(vec!["s1".into()]).admit("s2", "v9"));
    assert!(Gates::Venue("v9".into()).admit("s2", "v9"));
    assert!(!Gates::Venue("v9".into()).admit("s2", "v8"));
}

#[test]
fn outside_development_a_provider_is_required_and_a_shared_secret_refused() {
    let settings = |args: &[&str]| {
        #[derive(clap::Parser)]
        struct Args {
            #[command(flatten)]
            auth: AuthSettings,
        }
        <Args as clap::Parser>::parse_from(std::iter::once("onsale").chain(args.iter().copied()))
            .auth
    };
    assert_eq!(settings(&[]).secure(), Err(SecretError::NoIdentityProvider));
    assert_eq!(
        settings(&["--jwks-url", "https://id.example/jwks", "--jwt-secret", KEY]).secure(),
        Err(SecretError::DevelopmentOnly("ONSALE_JWT_SECRET"))
    );
    assert_eq!(
        settings(&["--jwks-url", "https://id.example/jwks"]).secure(),
        Ok(())
    );
    let dev = settings(&["--dev-mode"]);
    assert!(
        dev.clone().secured().is_ok(),
        "development: the secret defaulted"
    );
    assert!(
        settings(&["--jwks-url", "https://id.example/jwks"])
            .mint("ann", Role::Fan, false, None, 60)
            .is_err(),
        "no development tokens outside development mode"
    );
}

#[test]
fn secrets_are_required_long_and_not_the_development_ones_outside_development() {
    let check = |v: &str, dev: bool| {
        let mut s = SecretString::from(v);
        require_secret(&mut s, "ONSALE_X", "onsale-dev-secret", dev)
            .map(|()| s.expose_secret().to_owned())
    };
    assert_eq!(check("", false), Err(SecretError::Missing("ONSALE_X")));
    assert!(SecretError::Missing("ONSALE_X")
        .to_string()
        .starts_with("ONSALE_X is not set"));
    assert_eq!(
        check("onsale-dev-secret", false),
        Err(SecretError::Default("ONSALE_X"))
    );
    assert_eq!(check("short", false), Err(SecretError::Short("ONSALE_X")));
    assert_eq!(check(KEY, false), Ok(KEY.to_owned()));
    assert_eq!(check("", true), Ok("onsale-dev-secret".to_owned()));
    assert_eq!(check("short", true), Ok("short".to_owned()));
}
