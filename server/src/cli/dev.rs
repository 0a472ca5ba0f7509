//! What developers and the front end's build ask of the binary: a development token and the
//! OpenAPI document.

use onsale_edge::auth::{Gates, Role};
use onsale_edge::AuthSettings;

/// The flags of `onsale token` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct Token {
    #[command(flatten)]
    auth: AuthSettings,
    #[arg(long)]
    sub: String,
    #[arg(long, value_parser = parse_role, default_value = "fan")]
    role: Role,
    /// Sign the `verified` claim: the account is one the identity provider vouches for.
    #[arg(long)]
    verified: bool,
    /// A scanner's venue (it admits tickets of that venue's shows only).
    #[arg(long)]
    venue: Option<String>,
    /// A scanner's show (repeat): it admits tickets of these shows only.
    #[arg(long = "show")]
    shows: Vec<String>,
    #[arg(long, default_value_t = 3600)]
    ttl_secs: u64,
}

fn parse_role(s: &str) -> Result<Role, String> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|_| format!("unknown role {s}"))
}

impl Token {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let gates = match (self.role, self.venue, self.shows) {
            (Role::Scanner, _, shows) if !shows.is_empty() => Some(Gates::Shows(shows)),
            (Role::Scanner, Some(venue), _) => Some(Gates::Venue(venue)),
            (Role::Scanner, None, _) => {
                anyhow::bail!("a scanner's token names its --venue or its --show(s)")
            }
            _ => None,
        };
        let minted = self.auth.secured()?.mint(
            &self.sub,
            self.role,
            self.verified,
            gates.as_ref(),
            self.ttl_secs,
        )?;
        println!("{minted}");
        Ok(())
    }
}

/// The flags of `onsale openapi` (main.rs says what it does).
#[derive(Debug, clap::Args)]
pub(crate) struct Openapi {
    /// Leave out the waiting room's routes (a process without Redis has none).
    #[arg(long)]
    without_waiting_room: bool,
    /// Leave out the development sign-in (a process outside development mode has none).
    #[arg(long)]
    without_dev: bool,
}

impl Openapi {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let doc = onsale_server::openapi(!self.without_waiting_room, !self.without_dev)?;
        println!("{}", serde_json::to_string_pretty(&doc)?);
        Ok(())
    }
}
