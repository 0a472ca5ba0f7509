// `sqlx::migrate!` embeds migrations/ at compile time: a new migration must rebuild this crate.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
