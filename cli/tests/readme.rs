//! The README's command-line examples, run as written.
//!
//! A fenced ```` ```sh ```` block of README.md that follows an HTML comment
//! starting `<!-- readme-test: cli` is a list of `sluice` command lines.
//! Each block gets a fresh in-process broker
//! (`sluice_broker::testing::TestServer`, port 0), and each line runs, in
//! order, with the `sluice` binary built for this test:
//!
//! - the address: `SLUICE_ADDR` is set to the test broker's, so the lines
//!   carry no `--addr` and read as a user would type them against a broker
//!   on the default address;
//! - words are split as a POSIX shell would for what the README uses:
//!   blanks, `'single'` and `"double"` quotes, a backslash at the end of a
//!   line to continue it, and `#` starting a comment;
//! - `$NAME` (also inside double quotes) is a variable the test sets:
//!   `RECEIPT` is the last `"receipt"` that a `--json` line printed, so an
//!   example can delete what it received. An unknown variable fails;
//! - every line must exit 0; a comment holding `prints: TEXT` says that
//!   the line prints exactly `TEXT` (one line, variables substituted).
//!
//! A ```` ```sh ```` block after `<!-- readme-test: tls` is a TLS recipe,
//! run in a fresh folder: each `sluice-server` line starts an in-process
//! broker with its flags (port 0; file names are the folder's), each
//! `sluice` line runs the CLI against it, and every other line runs as
//! written with bash (`openssl` must be installed; without it the test
//! says it skips, except on CI, where it fails).

use std::collections::HashMap;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const README: &str = include_str!("../../README.md");
const MARKER: &str = "<!-- readme-test: cli";

/// One command line of a block.
#[derive(Debug, PartialEq, Eq)]
struct Line {
    /// Where it starts in README.md (1-based), for failure messages.
    number: usize,
    /// The words, variables not yet substituted (`Piece::Var`).
    words: Vec<Vec<Piece>>,
    /// What a `prints:` comment says it prints.
    prints: Option<Vec<Piece>>,
}

/// A piece of a word: literal text or a variable.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Var(String),
}

/// The marked blocks: each a list of command lines.
fn blocks(readme: &str) -> Vec<Vec<Line>> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].trim_start().starts_with(MARKER) {
            i += 1;
            continue;
        }
        // The comment may run over several lines.
        while !lines[i].contains("-->") {
            i += 1;
            assert!(
                i < lines.len(),
                "README.md: a readme-test comment never ends"
            );
        }
        i += 1;
        assert_eq!(
            lines.get(i).map(|l| l.trim()),
            Some("```sh"),
            "README.md line {}: a readme-test comment must be followed by a ```sh block",
            i + 1
        );
        i += 1;
        let start = i;
        while i < lines.len() && lines[i].trim() != "```" {
            i += 1;
        }
        assert!(
            i < lines.len(),
            "README.md line {start}: the ```sh block never ends"
        );
        blocks.push(command_lines(&lines[start..i], start + 1));
        i += 1;
    }
    blocks
}

/// Joins continued lines and parses each command line of a block whose
/// first line is README.md line `first`.
fn command_lines(block: &[&str], first: usize) -> Vec<Line> {
    let mut out = Vec::new();
    let mut pending = String::new();
    let mut pending_start = first;
    for (k, raw) in block.iter().enumerate() {
        if pending.is_empty() {
            pending_start = first + k;
        }
        if let Some(head) = raw.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(raw);
        let text = std::mem::take(&mut pending);
        if let Some(line) = parse_line(&text, pending_start) {
            out.push(line);
        }
    }
    assert!(
        pending.is_empty(),
        "README.md line {pending_start}: continued past the block"
    );
    out
}

/// Splits one command line into words and its comment; `None` for a line
/// with no words (blank or a comment alone).
fn parse_line(text: &str, number: usize) -> Option<Line> {
    let mut words: Vec<Vec<Piece>> = Vec::new();
    let mut word: Vec<Piece> = Vec::new();
    let mut in_word = false;
    let mut comment = None;
    let mut chars = text.char_indices().peekable();
    let push_text = |word: &mut Vec<Piece>, c: char| match word.last_mut() {
        Some(Piece::Text(t)) => t.push(c),
        _ => word.push(Piece::Text(c.to_string())),
    };
    while let Some((at, c)) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '#' if !in_word => {
                comment = Some(text[at + 1..].trim().to_owned());
                break;
            }
            '\'' => {
                in_word = true;
                // An empty '' is still a word.
                word.push(Piece::Text(String::new()));
                loop {
                    match chars.next() {
                        Some((_, '\'')) => break,
                        Some((_, c)) => push_text(&mut word, c),
                        None => panic!("README.md line {number}: unterminated '"),
                    }
                }
            }
            '"' => {
                in_word = true;
                word.push(Piece::Text(String::new()));
                loop {
                    match chars.next() {
                        Some((_, '"')) => break,
                        Some((_, '$')) => word.push(Piece::Var(var_name(&mut chars, number))),
                        Some((_, '\\')) => match chars.next() {
                            Some((_, c)) => push_text(&mut word, c),
                            None => panic!("README.md line {number}: unterminated \""),
                        },
                        Some((_, c)) => push_text(&mut word, c),
                        None => panic!("README.md line {number}: unterminated \""),
                    }
                }
            }
            '$' => {
                in_word = true;
                word.push(Piece::Var(var_name(&mut chars, number)));
            }
            '\\' => {
                in_word = true;
                if let Some((_, c)) = chars.next() {
                    push_text(&mut word, c);
                }
            }
            '|' | '&' | ';' | '<' | '>' | '`' | '(' | ')' => panic!(
                "README.md line {number}: `{c}` is shell syntax this test does not run; \
                 keep readme-test blocks to plain sluice command lines"
            ),
            c => {
                in_word = true;
                push_text(&mut word, c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return None;
    }
    let prints = comment
        .as_deref()
        .and_then(|c| c.split_once("prints:"))
        .map(|(_, text)| parse_text(text.trim(), number));
    Some(Line {
        number,
        words,
        prints,
    })
}

/// The name of a variable after its `$`: `NAME` or `{NAME}`.
fn var_name(chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>, number: usize) -> String {
    let braced = chars.next_if(|&(_, c)| c == '{').is_some();
    let mut name = String::new();
    while let Some((_, c)) = chars.next_if(|&(_, c)| c.is_ascii_alphanumeric() || c == '_') {
        name.push(c);
    }
    if braced {
        assert!(
            chars.next_if(|&(_, c)| c == '}').is_some(),
            "README.md line {number}: ${{ without its }}"
        );
    }
    assert!(
        !name.is_empty(),
        "README.md line {number}: a $ without a name"
    );
    name
}

/// Text with `$NAME`s in it (a `prints:` comment).
fn parse_text(text: &str, number: usize) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    let mut literal = String::new();
    while let Some((_, c)) = chars.next() {
        if c == '$' {
            if !literal.is_empty() {
                out.push(Piece::Text(std::mem::take(&mut literal)));
            }
            out.push(Piece::Var(var_name(&mut chars, number)));
        } else {
            literal.push(c);
        }
    }
    if !literal.is_empty() {
        out.push(Piece::Text(literal));
    }
    out
}

fn expand(pieces: &[Piece], vars: &HashMap<String, String>, number: usize) -> String {
    pieces
        .iter()
        .map(|p| match p {
            Piece::Text(t) => t.clone(),
            Piece::Var(name) => vars.get(name).cloned().unwrap_or_else(|| {
                panic!(
                    "README.md line {number}: ${name} is not set here \
                     (RECEIPT is set by an earlier --json line that printed a receipt)"
                )
            }),
        })
        .collect()
}

/// The last `"receipt"` anywhere in a JSON value.
fn last_receipt(v: &Value) -> Option<String> {
    match v {
        Value::Object(o) => o
            .values()
            .rev()
            .find_map(last_receipt)
            .or_else(|| o.get("receipt").and_then(Value::as_str).map(str::to_owned)),
        Value::Array(a) => a.iter().rev().find_map(last_receipt),
        _ => None,
    }
}

/// How long one README line may run: an example that waits for Ctrl-C
/// (`tail` without `--max`, `ping --count 0`) does not belong in a tested
/// block, and fails here instead of hanging the test run.
const LINE_PATIENCE: Duration = Duration::from_secs(30);

/// Runs `cmd` to its end, with its output, or kills it and fails after
/// [`LINE_PATIENCE`].
fn output_within(mut cmd: Command, number: usize) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the sluice binary runs");
    let deadline = Instant::now() + LINE_PATIENCE;
    loop {
        if child.try_wait().expect("wait for sluice").is_some() {
            return child.wait_with_output().expect("sluice's output");
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("README.md line {number}: still running after {LINE_PATIENCE:?}, killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs one block against a fresh broker.
fn run_block(block: &[Line]) {
    let server = sluice_broker::testing::TestServer::builder().start();
    let addr = server.addr().to_string();
    let mut vars: HashMap<String, String> = HashMap::new();
    for line in block {
        let words: Vec<String> = line
            .words
            .iter()
            .map(|w| expand(w, &vars, line.number))
            .collect();
        assert_eq!(
            words[0], "sluice",
            "README.md line {}: a readme-test block holds sluice command lines only",
            line.number
        );
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.args(&words[1..])
            .env("SLUICE_ADDR", &addr)
            .env_remove("SLUICE_TOKEN_FILE")
            .env_remove("SLUICE_TLS_CA")
            .env_remove("SLUICE_TLS_SERVER_NAME")
            .env_remove("SLUICE_TLS_CLIENT_CERT")
            .env_remove("SLUICE_TLS_CLIENT_KEY");
        let out = output_within(cmd, line.number);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "README.md line {}: `{}` exited with {}\nstdout:\n{stdout}\nstderr:\n{}",
            line.number,
            words.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        if let Some(prints) = &line.prints {
            let expected = expand(prints, &vars, line.number);
            assert_eq!(
                stdout.trim_end(),
                expected,
                "README.md line {}: `{}` printed something else than its comment says",
                line.number,
                words.join(" ")
            );
        }
        if words.iter().any(|w| w == "--json") {
            let value: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
                panic!(
                    "README.md line {}: --json printed no JSON ({e}): {stdout}",
                    line.number
                )
            });
            if let Some(receipt) = last_receipt(&value) {
                vars.insert("RECEIPT".into(), receipt);
            }
        }
    }
}

#[test]
fn the_readme_cli_examples_run_as_written() {
    let blocks = blocks(README);
    assert!(
        !blocks.is_empty(),
        "README.md has no block marked {MARKER} -->: the examples would go untested"
    );
    for block in &blocks {
        assert!(!block.is_empty(), "a marked README block without a command");
        run_block(block);
    }
}

#[test]
fn command_lines_split_as_a_shell_would() {
    let text = |s: &str| Piece::Text(s.into());
    let lines = command_lines(
        &[
            "# a comment alone",
            "",
            "sluice send orders 'hello world' --attr \"k=v w\"   # prints: sent",
            "sluice delete orders \"$RECEIPT\" \\",
            "    --json   # prints: deleted $RECEIPT",
            "sluice a''b x\\ y",
        ],
        10,
    );
    assert_eq!(
        lines,
        [
            Line {
                number: 12,
                words: vec![
                    vec![text("sluice")],
                    vec![text("send")],
                    vec![text("orders")],
                    vec![text("hello world")],
                    vec![text("--attr")],
                    vec![text("k=v w")],
                ],
                prints: Some(vec![text("sent")]),
            },
            Line {
                number: 13,
                words: vec![
                    vec![text("sluice")],
                    vec![text("delete")],
                    vec![text("orders")],
                    vec![text(""), Piece::Var("RECEIPT".into())],
                    vec![text("--json")],
                ],
                prints: Some(vec![text("deleted "), Piece::Var("RECEIPT".into())]),
            },
            Line {
                number: 15,
                words: vec![
                    vec![text("sluice")],
                    vec![text("a"), text("b")],
                    vec![text("x y")],
                ],
                prints: None,
            },
        ]
    );
}

#[test]
fn the_last_receipt_of_a_json_reply_is_found() {
    let v: Value = serde_json::from_str(
        r#"[{"id": "1", "receipt": "aa"}, {"id": "2", "receipt": "bb", "attributes": {}}]"#,
    )
    .unwrap();
    assert_eq!(last_receipt(&v).as_deref(), Some("bb"));
    assert_eq!(last_receipt(&serde_json::json!([])), None);
}

const TLS_MARKER: &str = "<!-- readme-test: tls";

/// The lines of each block marked [`TLS_MARKER`], continued lines joined,
/// with their README.md line numbers.
fn tls_blocks(readme: &str) -> Vec<Vec<(usize, String)>> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].trim_start().starts_with(TLS_MARKER) {
            i += 1;
            continue;
        }
        assert_eq!(
            lines.get(i + 1).map(|l| l.trim()),
            Some("```sh"),
            "README.md line {}: a readme-test: tls comment must be followed by a ```sh block",
            i + 2
        );
        i += 2;
        let mut block = Vec::new();
        let mut pending = String::new();
        let mut start = i + 1;
        while i < lines.len() && lines[i].trim() != "```" {
            if pending.is_empty() {
                start = i + 1;
            }
            match lines[i].strip_suffix('\\') {
                Some(head) => {
                    pending.push_str(head);
                    pending.push(' ');
                }
                None => {
                    pending.push_str(lines[i]);
                    block.push((start, std::mem::take(&mut pending)));
                }
            }
            i += 1;
        }
        assert!(
            i < lines.len(),
            "README.md line {start}: the ```sh block never ends"
        );
        blocks.push(block);
        i += 1;
    }
    blocks
}

/// Runs one TLS recipe in `dir`.
fn run_tls_block(block: &[(usize, String)], dir: &std::path::Path) {
    let mut server = None;
    for (number, text) in block {
        let Some(line) = parse_line(text, *number) else {
            continue;
        };
        let words: Vec<String> = line
            .words
            .iter()
            .map(|w| expand(w, &HashMap::new(), *number))
            .collect();
        match words[0].as_str() {
            "sluice-server" => {
                // The files the recipe made, where the recipe made them.
                let args: Vec<String> = words[1..]
                    .iter()
                    .map(|w| match dir.join(w) {
                        p if p.is_file() => p.display().to_string(),
                        _ => w.clone(),
                    })
                    .collect();
                let flag = |name: &str| {
                    let at = args.iter().position(|a| a == name);
                    at.and_then(|i| args.get(i + 1))
                        .map(std::path::PathBuf::from)
                };
                let (cert, key) = (flag("--tls-cert"), flag("--tls-key"));
                let (Some(cert), Some(key)) = (cert, key) else {
                    panic!("README.md line {number}: a TLS recipe starts its broker with TLS");
                };
                // Made as the README says, the certificate draws no warning:
                // every TLS client accepts it, not only sluice's.
                let settings = sluice_broker::server::tls::TlsSettings::load(cert, key, None)
                    .unwrap_or_else(|e| panic!("README.md line {number}: {e}"));
                assert_eq!(
                    settings.cert_warning, None,
                    "README.md line {number}: the recipe's certificate"
                );
                server = Some(
                    sluice_broker::testing::TestServer::builder()
                        .args(&args)
                        .start(),
                );
            }
            "sluice" => {
                let Some(server) = &server else {
                    panic!("README.md line {number}: sluice before sluice-server");
                };
                let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
                cmd.args(&words[1..])
                    .current_dir(dir)
                    .env("SLUICE_ADDR", server.addr().to_string())
                    .env_remove("SLUICE_TOKEN_FILE")
                    .env_remove("SLUICE_TLS_CA")
                    .env_remove("SLUICE_TLS_SERVER_NAME")
                    .env_remove("SLUICE_TLS_CLIENT_CERT")
                    .env_remove("SLUICE_TLS_CLIENT_KEY");
                let out = output_within(cmd, *number);
                assert!(
                    out.status.success(),
                    "README.md line {number}: `{}` exited with {}\nstdout:\n{}\nstderr:\n{}",
                    words.join(" "),
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            _ => {
                let mut cmd = Command::new("bash");
                cmd.args(["-euo", "pipefail", "-c", text]).current_dir(dir);
                let out = output_within(cmd, *number);
                assert!(
                    out.status.success(),
                    "README.md line {number}: `{text}` exited with {}\nstderr:\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    assert!(server.is_some(), "a TLS recipe that starts no broker");
}

#[test]
fn the_readme_tls_recipes_run_as_written() {
    let openssl = Command::new("openssl")
        .arg("version")
        .stdout(Stdio::null())
        .status();
    if !openssl.is_ok_and(|s| s.success()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "openssl is missing: CI must run the README's TLS recipes (.ci/run installs it)"
        );
        eprintln!("SKIPPED the_readme_tls_recipes_run_as_written: openssl is not installed");
        return;
    }
    let blocks = tls_blocks(README);
    assert!(
        blocks.len() >= 2,
        "README.md has fewer than two blocks marked {TLS_MARKER} -->: a recipe goes untested"
    );
    for (k, block) in blocks.iter().enumerate() {
        let dir =
            std::env::temp_dir().join(format!("sluice-readme-tls-{}-{k}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        run_tls_block(block, &dir);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
