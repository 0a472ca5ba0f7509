//! Every setting of the `onsale` commands, as one Markdown table (`onsale settings`): its
//! environment variable, its flag, its default, the commands that accept it and what it sets,
//! taken from the command line's own definitions so the operator's guide (docs/operations.md,
//! kept equal to this by a test) cannot drift from the code.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A setting read from the environment alone, before the command line is parsed.
#[derive(Debug)]
pub struct EnvironmentSetting {
    pub name: &'static str,
    pub default: &'static str,
    pub what: &'static str,
}

#[derive(Default)]
struct Row {
    flag: String,
    defaults: BTreeMap<String, Vec<String>>,
    commands: Vec<String>,
    what: String,
}

/// The table of every argument of `cli`'s commands (and their subcommands) that an environment
/// variable can set, by variable, then the settings read from the environment alone (`extra`).
pub fn markdown(cli: &clap::Command, extra: &[EnvironmentSetting]) -> String {
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    for sub in cli.get_subcommands() {
        collect(sub, sub.get_name().to_owned(), &mut rows);
    }
    let mut out = String::from(
        "| variable | flag | default | accepted by | what it sets |\n|---|---|---|---|---|\n",
    );
    for (name, row) in &rows {
        let default = match row.defaults.len() {
            0 => "unset".to_owned(),
            1 => row.defaults.keys().next().cloned().unwrap_or_default(),
            _ => row
                .defaults
                .iter()
                .map(|(d, cmds)| format!("{d} ({})", cmds.join(", ")))
                .collect::<Vec<_>>()
                .join("; "),
        };
        let _ = writeln!(
            out,
            "| `{name}` | `{}` | {default} | {} | {} |",
            row.flag,
            row.commands.join(", "),
            row.what
        );
    }
    for s in extra {
        let default = if s.default.is_empty() {
            "unset".to_owned()
        } else {
            format!("`{}`", s.default)
        };
        let _ = writeln!(
            out,
            "| `{}` | | {default} | every process, before its flags | {} |",
            s.name,
            cell(s.what)
        );
    }
    out
}

fn collect(command: &clap::Command, path: String, rows: &mut BTreeMap<String, Row>) {
    for arg in command.get_arguments() {
        let Some(env) = arg.get_env().and_then(|e| e.to_str()) else {
            continue;
        };
        let row = rows.entry(env.to_owned()).or_default();
        if row.flag.is_empty() {
            row.flag = arg.get_long().map(|l| format!("--{l}")).unwrap_or_default();
        }
        if row.what.is_empty() {
            let help = arg.get_long_help().or_else(|| arg.get_help());
            row.what = help.map(|h| cell(&h.to_string())).unwrap_or_default();
        }
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .filter_map(|d| d.to_str())
            .filter(|d| !d.is_empty())
            .map(str::to_owned)
            .collect();
        if !defaults.is_empty() && !arg.is_hide_default_value_set() {
            row.defaults
                .entry(format!("`{}`", defaults.join(",")))
                .or_default()
                .push(path.clone());
        }
        if !row.commands.contains(&path) {
            row.commands.push(path.clone());
        }
    }
    for sub in command.get_subcommands() {
        collect(sub, format!("{path} {}", sub.get_name()), rows);
    }
}

/// Help text as one table cell: one line, no column breaks.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, Command};

    #[test]
    fn each_variable_is_one_row_with_its_flag_defaults_and_commands() {
        let cli = Command::new("onsale")
            .subcommand(
                Command::new("serve")
                    .arg(
                        Arg::new("listen")
                            .long("listen")
                            .env("ONSALE_LISTEN")
                            .default_value("127.0.0.1:8080")
                            .help("Where the API\nlistens | for fans"),
                    )
                    .arg(Arg::new("show").long("show")),
            )
            .subcommand(
                Command::new("shard").subcommand(
                    Command::new("move").arg(
                        Arg::new("listen")
                            .long("listen")
                            .env("ONSALE_LISTEN")
                            .default_value("0.0.0.0:1"),
                    ),
                ),
            );
        let table = markdown(
            &cli,
            &[EnvironmentSetting {
                name: "ONSALE_TRACE_SAMPLE",
                default: "0",
                what: "the share of traces kept",
            }],
        );
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert_eq!(
            lines[2],
            "| `ONSALE_LISTEN` | `--listen` | `0.0.0.0:1` (shard move); `127.0.0.1:8080` (serve) \
             | serve, shard move | Where the API listens \\| for fans |"
        );
        assert_eq!(
            lines[3],
            "| `ONSALE_TRACE_SAMPLE` | | `0` | every process, before its flags | the share of traces kept |"
        );
    }
}
