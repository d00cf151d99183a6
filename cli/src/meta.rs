//! The command line about itself: the full clap command (its `--help` ends
//! with the exit statuses), parsing with usage errors as JSON under
//! `--json`, and the shell completions and man pages generated from the
//! same definition, so they never drift from it.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches};

use crate::args::{Cli, CompletionsArgs, ManArgs};
use crate::report::{ERROR_FORMAT_HELP, EXIT_STATUSES, EXIT_USAGE, error_json, exit_status_help};
use crate::{Failure, Outcome, print};

/// The name the completions and the man pages are generated for.
const BIN_NAME: &str = "sluice";

/// The whole command line: the derived definition, with the exit statuses
/// and the error format after the long help (`--help`, not `-h`).
pub fn command() -> clap::Command {
    let cmd = Cli::command();
    let long = match cmd.get_after_help() {
        Some(short) => format!("{short}\n\n{}", exit_status_help()),
        None => exit_status_help(),
    };
    let mut cmd = cmd.after_long_help(long);
    // Those that print no results and connect nowhere do not offer --json
    // or the connection flags: each gets a hidden copy of every global flag,
    // which clap then does not propagate to it (they still parse, and do
    // nothing).
    let global: Vec<clap::Arg> = cmd
        .get_arguments()
        .filter(|a| a.is_global_set())
        .cloned()
        .collect();
    for offline in OFFLINE {
        cmd = cmd.mut_subcommand(offline, |sub| {
            global
                .iter()
                .fold(sub, |sub, a| sub.arg(a.clone().global(false).hide(true)))
        });
    }
    cmd
}

/// The subcommands that print a script or a page: no JSON, no broker.
const OFFLINE: [&str; 2] = ["completions", "man"];

/// The man page of `cmd`: clap_mangen's, with the exit statuses and the
/// error format as sections of their own on the top-level page (the
/// after-help text is in the DESCRIPTION already).
fn man_page(cmd: clap::Command, top: bool) -> Result<Vec<u8>, std::io::Error> {
    let cmd = cmd.after_help(None::<&str>).after_long_help(None::<&str>);
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut page)?;
    if top {
        let mut roff = roff::Roff::new();
        roff.control("SH", ["EXIT STATUS"]);
        for (code, meaning) in EXIT_STATUSES {
            roff.control("TP", [])
                .text([roff::bold(code.to_string())])
                .text([roff::roman(meaning)]);
        }
        roff.control("SH", ["ERRORS"]).control("nf", []);
        for line in ERROR_FORMAT_HELP.lines() {
            roff.text([roff::roman(line)]);
        }
        roff.control("fi", []);
        // Without a second preamble: the page's own defines the apostrophe.
        page.extend_from_slice(roff.to_roff().as_bytes());
    }
    Ok(page)
}

/// Writes the page of `cmd` and of each of its subcommands into `dir`, as
/// `sluice.1`, `sluice-queue.1`, `sluice-queue-create.1`, ...
fn write_pages(cmd: clap::Command, dir: &Path, top: bool) -> Result<(), std::io::Error> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub.clone(), dir, false)?;
    }
    let file = dir.join(format!(
        "{}.1",
        cmd.get_display_name().unwrap_or_else(|| cmd.get_name())
    ));
    std::fs::write(file, man_page(cmd, top)?)
}

/// Parses the process's arguments. Help and version print and end the
/// process as clap does; a usage error under `--json` prints a JSON error
/// instead of clap's text, and comes back as the exit status (2).
pub fn parse() -> Result<Cli, ExitCode> {
    let parsed = command()
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches));
    match parsed {
        Ok(cli) => Ok(cli),
        Err(err) if err.use_stderr() && json_requested(std::env::args_os().skip(1)) => {
            let message = match err.kind() {
                // Clap's text is the help itself.
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    "a subcommand is required (see --help)".to_owned()
                }
                _ => usage_message(&err.to_string()),
            };
            eprintln!("{}", error_json("Usage", &message, false, &[]));
            Err(ExitCode::from(EXIT_USAGE))
        }
        Err(err) => err.exit(),
    }
}

/// Whether `--json` is among the options (before any `--`), for the one
/// case where clap could not say: the command line did not parse.
fn json_requested(args: impl Iterator<Item = OsString>) -> bool {
    args.take_while(|a| a != "--").any(|a| a == "--json")
}

/// The gist of clap's error text: its first paragraph without the
/// `error: ` label.
fn usage_message(rendered: &str) -> String {
    let first = rendered.split("\n\n").next().unwrap_or(rendered).trim();
    first.strip_prefix("error: ").unwrap_or(first).to_owned()
}

pub fn completions(a: &CompletionsArgs) -> Outcome {
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut command(), BIN_NAME, &mut script);
    print(&String::from_utf8_lossy(&script));
    Outcome::default()
}

pub fn man(a: &ManArgs) -> Result<Outcome, Failure> {
    match &a.out_dir {
        Some(dir) => {
            // Built, so that subcommands know their display names
            // (sluice-queue-create); `help` gets no page.
            let mut cmd = command().disable_help_subcommand(true);
            cmd.build();
            std::fs::create_dir_all(dir)
                .and_then(|()| write_pages(cmd, dir, true))
                .map_err(|e| {
                    Failure::Usage(format!("writing man pages to {}: {e}", dir.display()))
                })?;
        }
        None => {
            let page = man_page(command().disable_help_subcommand(true), true)
                .map_err(|e| Failure::Usage(format!("rendering the man page: {e}")))?;
            print(&String::from_utf8_lossy(&page));
        }
    }
    Ok(Outcome::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> impl Iterator<Item = OsString> {
        list.iter()
            .map(OsString::from)
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn json_is_requested_only_before_a_double_dash() {
        assert!(json_requested(args(&["--json", "stats"])));
        assert!(json_requested(args(&["send", "q", "--json", "--bogus"])));
        assert!(!json_requested(args(&["send", "q", "--", "--json"])));
        assert!(!json_requested(args(&["send", "q", "--jsonx"])));
    }

    #[test]
    fn usage_messages_drop_the_label_and_the_hint() {
        let rendered =
            "error: unexpected argument '--bogus' found\n\n  tip: ...\n\nUsage: sluice stats\n";
        assert_eq!(
            usage_message(rendered),
            "unexpected argument '--bogus' found"
        );
    }

    #[test]
    fn the_definition_is_consistent() {
        command().debug_assert();
    }
}
