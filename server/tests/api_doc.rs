//! docs/api.md is kept in step with the OpenAPI document the server serves: every operation the
//! document has is a `### \`METHOD /path\`` heading there and no heading names one it lacks, and
//! every error code (`ErrorCode`, as the document lists it) is in its table and no other is.

use std::collections::BTreeSet;

fn api_md() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api.md");
    std::fs::read_to_string(&path).expect("docs/api.md")
}

#[test]
fn every_operation_of_the_openapi_document_has_its_heading_in_docs_api_md_and_no_other() {
    let doc = onsale_server::openapi(true, true).expect("the document");
    let documented: BTreeSet<String> = doc["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .expect("operations")
                .keys()
                .map(move |method| format!("{} {path}", method.to_uppercase()))
        })
        .collect();
    let headed: BTreeSet<String> = api_md()
        .lines()
        .filter_map(|l| l.strip_prefix("### `")?.strip_suffix('`'))
        .map(str::to_owned)
        .collect();
    let missing: Vec<_> = documented.difference(&headed).collect();
    let extra: Vec<_> = headed.difference(&documented).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/api.md lacks {missing:?} and names {extra:?}, which the OpenAPI document does not have"
    );
}

#[test]
fn every_error_code_is_in_the_table_of_docs_api_md_and_no_other() {
    let doc = onsale_server::openapi(true, true).expect("the document");
    let codes: BTreeSet<String> = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .expect("ErrorCode is an enum of the document")
        .iter()
        .map(|c| c.as_str().expect("a code").to_owned())
        .collect();
    let tabled: BTreeSet<String> = api_md()
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split_once('`'))
        .map(|(code, _)| code.to_owned())
        .collect();
    let missing: Vec<_> = codes.difference(&tabled).collect();
    let extra: Vec<_> = tabled.difference(&codes).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/api.md's codes lack {missing:?} and list {extra:?}, which ErrorCode does not have"
    );
}
