//! Tests of the configuration: defaults, every flag and variable, the config
//! file, precedence, every validation error and the effective rendering.

use super::display::quoted;
use super::memory::{MemoryLimit, MemorySource};
use super::*;
use crate::server::limits::GIB;

use crate::sync::{AtomicU32, Ordering};
use sluice_protocol::limits as wire;
use sluice_protocol::units::format_duration;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;

const TOKEN: &str = "s3cr3t-t0ken-value";

/// A file in the system temp folder, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, content: &[u8]) -> TempFile {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "sluice-config-test-{}-{n}-{name}",
            std::process::id()
        ));
        std::fs::write(&path, content).expect("the temp folder is writable");
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("temp paths are UTF-8 here")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn host() -> Host {
    Host {
        cores: 4,
        memory: Some(MemoryLimit {
            bytes: 8 * GIB,
            source: MemorySource::PhysicalMemory,
        }),
    }
}

fn raw(args: &[&str], env: &[(&str, &str)]) -> Result<RawArgs, clap::Error> {
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let argv = std::iter::once("sluice-server").chain(args.iter().copied());
    RawArgs::try_parse_from_env(argv, |name| env.get(name).cloned())
}

fn config_env(args: &[&str], env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let raw = raw(args, env).unwrap_or_else(|err| panic!("{args:?} {env:?}: {err}"));
    Config::from_args_on(raw, &host())
}

fn config(args: &[&str]) -> Result<Config, ConfigError> {
    config_env(args, &[])
}

fn ok(args: &[&str]) -> Config {
    config(args).unwrap_or_else(|err| panic!("{args:?}: {err}"))
}

fn err(args: &[&str]) -> ConfigError {
    match config(args) {
        Ok(config) => panic!("{args:?} was accepted:\n{config}"),
        Err(err) => err,
    }
}

fn sock(s: &str) -> SocketAddr {
    s.parse().expect("test addresses are valid")
}

#[test]
fn clap_command_is_well_formed() {
    RawArgs::command().debug_assert();
}

#[test]
fn defaults() {
    let c = ok(&[]);
    assert_eq!(c.listen, sock("127.0.0.1:7171"));
    assert_eq!(c.shards, 4);
    assert_eq!(c.cpus, CpuPlacement::Auto);
    assert_eq!(c.io, IoChoice::Auto);
    assert!(c.auth_token.is_none());
    assert!(!c.insecure);
    assert_eq!(c.metrics, Some(sock("127.0.0.1:7172")));
    assert_eq!(c.connections_max, 10_000);
    assert_eq!(c.frame_bytes_max, 1 << 20);
    assert_eq!(c.hello_frame_bytes_max, 4 << 10);
    assert_eq!(c.hello_timeout, Duration::from_secs(10));
    assert_eq!(c.frame_timeout, Duration::from_secs(30));
    assert_eq!(c.requests_in_flight_max, 1024);
    assert_eq!(c.unsent_bytes_max, 4 << 20);
    assert_eq!(c.unsent_bytes_total_max, 256 << 20);
    assert_eq!(c.memory_max_bytes, 4 * GIB);
    assert_eq!(
        c.memory_max_origin,
        MemoryMaxOrigin::HalfOf(host().memory.expect("set"))
    );
    assert_eq!(c.queues_max, 10_000);
    assert_eq!(c.log_filter, "info");
    assert_eq!(c.shutdown_timeout, Duration::from_secs(10));
    assert_eq!(c.idle_spin, Duration::ZERO);
}

#[test]
fn host_dependent_defaults() {
    let on = |cores, memory| {
        let raw = raw(&[], &[]).expect("no arguments parse");
        Config::from_args_on(raw, &Host { cores, memory }).expect("defaults are valid")
    };
    assert_eq!(on(128, None).shards, SERVER_SHARDS_MAX);
    assert_eq!(on(0, None).shards, 1);
    assert_eq!(on(1, None).shards, 1);
    let fallback = on(2, None);
    assert_eq!(fallback.memory_max_bytes, MEMORY_MAX_FALLBACK);
    assert_eq!(fallback.memory_max_origin, MemoryMaxOrigin::Fallback);
    let cgroup = MemoryLimit {
        bytes: 3 * GIB,
        source: MemorySource::CgroupV2("/sys/fs/cgroup/memory.max".into()),
    };
    let limited = on(2, Some(cgroup.clone()));
    assert_eq!(limited.memory_max_bytes, 3 * GIB / 2);
    assert_eq!(limited.memory_max_origin, MemoryMaxOrigin::HalfOf(cgroup));
    assert!(
        limited
            .to_string()
            .contains("half of cgroup v2 limit /sys/fs/cgroup/memory.max (3GiB)")
    );
}

/// Every setting at a value other than its default, as flags.
fn every_flag(token_path: &str) -> Vec<String> {
    [
        "--listen=0.0.0.0:9000",
        "--shards=3",
        "--cpus=1-2,5",
        "--io=epoll",
        &format!("--token-file={token_path}"),
        "--insecure",
        "--metrics-addr=[::1]:0",
        "--max-connections=500",
        "--max-connections-before-hello=50",
        "--frame-bytes-max=2MiB",
        "--hello-frame-bytes-max=8KiB",
        "--hello-timeout=2s",
        "--frame-timeout=1m",
        "--requests-in-flight-max=64",
        "--unsent-bytes-max=8MiB",
        "--unsent-bytes-total-max=1GiB",
        "--memory-max=512MiB",
        "--queues-max=20",
        "--log=warn,sluice_broker=debug",
        "--shutdown-timeout=250ms",
        "--idle-spin=50us",
        "--snapshot=/var/lib/sluice/sluice.snapshot",
        "--snapshot-keep=5",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn assert_every_setting(c: &Config, token_path: &str) {
    assert_eq!(c.listen, sock("0.0.0.0:9000"));
    assert_eq!(c.shards, 3);
    assert!(c.shards_given);
    assert_eq!(c.cpus, CpuPlacement::List(vec![1, 2, 5]));
    assert_eq!(c.io, IoChoice::Epoll);
    let token = c.auth_token.as_ref().expect("token configured");
    assert_eq!(token.as_bytes(), TOKEN.as_bytes());
    assert_eq!(token.path(), Path::new(token_path));
    assert!(c.insecure);
    assert_eq!(
        c.metrics,
        Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 0))
    );
    assert_eq!(c.connections_max, 500);
    assert_eq!(c.connections_before_hello_max, 50);
    assert_eq!(c.frame_bytes_max, 2 << 20);
    assert_eq!(c.hello_frame_bytes_max, 8 << 10);
    assert_eq!(c.hello_timeout, Duration::from_secs(2));
    assert_eq!(c.frame_timeout, Duration::from_secs(60));
    assert_eq!(c.requests_in_flight_max, 64);
    assert_eq!(c.unsent_bytes_max, 8 << 20);
    assert_eq!(c.unsent_bytes_total_max, GIB);
    assert_eq!(c.memory_max_bytes, 512 << 20);
    assert_eq!(c.memory_max_origin, MemoryMaxOrigin::Given);
    assert_eq!(c.queues_max, 20);
    assert_eq!(c.log_filter, "warn,sluice_broker=debug");
    assert_eq!(c.shutdown_timeout, Duration::from_millis(250));
    assert_eq!(c.idle_spin, Duration::from_micros(50));
    assert_eq!(
        c.snapshot.as_deref(),
        Some(Path::new("/var/lib/sluice/sluice.snapshot"))
    );
    assert_eq!(c.snapshot_keep, 5);
}

#[test]
fn the_start_up_log_prints_sizes_and_durations_in_the_grammar() {
    let host = Host {
        cores: 2,
        memory: Some(MemoryLimit {
            bytes: 24_683_664 * 1024,
            source: MemorySource::PhysicalMemory,
        }),
    };
    let c = Config::from_args_on(
        RawArgs::try_parse_from_env(["sluice-server"], |_| None).unwrap(),
        &host,
    )
    .unwrap();
    let rendered = c.to_string();
    // Half of 23.5 GiB, rounded down to a whole MiB, not 12341832KiB.
    assert!(
        rendered.contains("memory_max = \"12052MiB\"  # half of physical memory (about 23.5GiB)\n"),
        "{rendered}"
    );
    assert!(rendered.contains("idle_spin = \"0s\"\n"), "{rendered}");
}

#[test]
fn the_connections_before_hello_default_follows_max_connections_and_stays_below_it() {
    let c = ok(&[]);
    assert_eq!(
        (c.connections_before_hello_max, c.shards_given),
        (1000, false)
    );
    assert_eq!(c.snapshot_keep, 3);
    assert_eq!(
        ok(&["--max-connections", "10"]).connections_before_hello_max,
        10
    );
    let e = err(&[
        "--max-connections",
        "10",
        "--max-connections-before-hello",
        "11",
    ])
    .to_string();
    assert!(
        e.contains("max-connections-before-hello") && e.contains("10"),
        "{e}"
    );
    let e = err(&["--max-connections-before-hello", "0"]).to_string();
    assert!(e.contains("max-connections-before-hello"), "{e}");
    let e = err(&["--snapshot-keep", "1001"]).to_string();
    assert!(e.contains("snapshot-keep"), "{e}");
}

#[test]
fn every_flag_is_read() {
    let token = TempFile::new("token", format!("{TOKEN}\n").as_bytes());
    let args = every_flag(token.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_every_setting(&ok(&args), token.path());
}

/// `--flag=value` as `SLUICE_FLAG=value`.
fn as_env(flags: &[String]) -> Vec<(String, String)> {
    flags
        .iter()
        .map(|flag| {
            let (name, value) = flag.split_once('=').unwrap_or((flag, "true"));
            let var = format!("SLUICE_{}", name.trim_start_matches("--").replace('-', "_"));
            (var.to_ascii_uppercase(), value.to_owned())
        })
        .collect()
}

#[test]
fn every_variable_is_read() {
    let token = TempFile::new("token", format!("{TOKEN}\r\n").as_bytes());
    let env = as_env(&every_flag(token.path()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_every_setting(
        &config_env(&[], &env).expect("valid environment"),
        token.path(),
    );
}

/// `--flag=value` as a config file line.
fn as_toml(flags: &[String]) -> String {
    let mut text = String::new();
    for flag in flags {
        let (name, value) = flag.split_once('=').unwrap_or((flag, "true"));
        let key = name.trim_start_matches("--").replace('-', "_");
        let value = match key.as_str() {
            "insecure" => value.to_owned(),
            _ => quoted(value),
        };
        text.push_str(&format!("{key} = {value}\n"));
    }
    text
}

#[test]
fn every_config_file_key_is_read() {
    let token = TempFile::new("token", TOKEN.as_bytes());
    let file = TempFile::new("all.toml", as_toml(&every_flag(token.path())).as_bytes());
    assert_every_setting(&ok(&["--config", file.path()]), token.path());
    // Also when the file is named by the environment.
    let c = config_env(&[], &[("SLUICE_CONFIG", file.path())]).expect("valid file");
    assert_every_setting(&c, token.path());
}

#[test]
fn config_file_numbers_and_strings() {
    let file = TempFile::new(
        "numbers.toml",
        b"max_connections = 5000\nframe_bytes_max = 2097152\nqueues_max = \"7\"\n\
          unsent_bytes_max = \"2MiB\"\nhello_timeout = \"1m30s\"\ninsecure = false\n",
    );
    let c = ok(&["--config", file.path()]);
    assert_eq!(c.connections_max, 5000);
    assert_eq!(c.frame_bytes_max, 2 << 20);
    assert_eq!(c.queues_max, 7);
    assert_eq!(c.unsent_bytes_max, 2 << 20);
    assert_eq!(c.hello_timeout, Duration::from_secs(90));
    assert!(!c.insecure);
}

#[test]
fn precedence_flag_then_env_then_file_then_default() {
    let file = TempFile::new(
        "precedence.toml",
        b"max_connections = 1\nqueues_max = 2\nrequests_in_flight_max = 3\ninsecure = true\n",
    );
    let env = [
        ("SLUICE_MAX_CONNECTIONS", "10"),
        ("SLUICE_QUEUES_MAX", "20"),
        ("SLUICE_INSECURE", "false"),
    ];
    let c = config_env(&["--config", file.path(), "--max-connections=100"], &env)
        .expect("valid layers");
    assert_eq!(c.connections_max, 100, "flag beats env and file");
    assert_eq!(c.queues_max, 20, "env beats file");
    assert_eq!(c.requests_in_flight_max, 3, "file beats default");
    assert!(
        !c.insecure,
        "SLUICE_INSECURE=false beats insecure = true in the file"
    );
    assert_eq!(
        c.frame_bytes_max,
        wire::FRAME_BYTES_MAX_DEFAULT,
        "default when nobody says"
    );

    let c = config_env(&["--insecure=false"], &[("SLUICE_INSECURE", "yes")]).expect("valid");
    assert!(!c.insecure, "--insecure=false beats the environment");
    let c = config_env(&[], &[("SLUICE_INSECURE", "1")]).expect("valid");
    assert!(c.insecure);
}

#[test]
fn the_process_environment_is_not_read_with_an_explicit_one() {
    // Whatever this process's environment holds, an empty explicit one
    // yields the defaults.
    let parsed = raw(&[], &[]).expect("no arguments parse");
    assert_eq!(parsed, RawArgs::default());
}

#[test]
fn syntax_errors_on_the_command_line() {
    for (args, needle) in [
        (&["--hello-timeout=10"][..], "has no unit"),
        (&["--frame-timeout=1.5"], "has no unit"),
        (&["--frame-timeout=.5s"], "not a duration"),
        (&["--frame-bytes-max=1.5B"], "whole number of bytes"),
        (&["--frame-bytes-max=1MB"], "ambiguous"),
        (&["--io=kqueue"], "auto, uring or epoll"),
        (&["--listen=example.com:80"], "IP address"),
        (&["--listen=127.0.0.1"], "HOST:PORT"),
        (&["--metrics-addr=nowhere"], "`off`"),
        (&["--shards=-1"], "whole number"),
        (&["--queues-max=99999999999999999999999"], "too large"),
        (&["--insecure=maybe"], "maybe"),
        (&["--no-such-flag"], "no-such-flag"),
    ] {
        let err = raw(args, &[]).expect_err("refused by the parser");
        assert!(err.to_string().contains(needle), "{args:?}: {err}");
    }
    let err = raw(&[], &[("SLUICE_SHUTDOWN_TIMEOUT", "5")]).expect_err("no unit");
    assert!(err.to_string().contains("has no unit"), "{err}");
}

#[test]
fn config_file_errors_name_the_file_and_key() {
    let unknown = TempFile::new(
        "unknown.toml",
        b"listen = \"127.0.0.1:1\"\nmax_conections = 5\n",
    );
    let e = err(&["--config", unknown.path()]);
    assert!(
        matches!(&e, ConfigError::UnknownKey { key, .. } if key == "max_conections"),
        "{e}"
    );
    let message = e.to_string();
    assert!(
        message.contains(unknown.path()) && message.contains("max_connections"),
        "{message}"
    );

    let table = TempFile::new("table.toml", b"[server]\nlisten = \"127.0.0.1:1\"\n");
    assert!(
        matches!(err(&["--config", table.path()]), ConfigError::UnknownKey { key, .. } if key == "server")
    );

    let config_key = TempFile::new("config.toml", b"config = \"other.toml\"\n");
    assert!(matches!(
        err(&["--config", config_key.path()]),
        ConfigError::UnknownKey { .. }
    ));

    for (text, key, needle) in [
        ("hello_timeout = 10\n", "hello_timeout", "has no unit"),
        (
            "frame_bytes_max = [1]\n",
            "frame_bytes_max",
            "invalid type: sequence, expected a string or a whole number",
        ),
        ("max_connections = -5\n", "max_connections", "whole number"),
        ("insecure = \"yes\"\n", "insecure", "true or false"),
        (
            "token_file = 3\n",
            "token_file",
            "expected a path in a string",
        ),
        ("log = [\"info\"]\n", "log", "expected a string"),
        ("io = \"fast\"\n", "io", "auto, uring or epoll"),
        ("shards = 2.5\n", "shards", "floating point `2.5`"),
    ] {
        let file = TempFile::new("bad.toml", text.as_bytes());
        let e = err(&["--config", file.path()]);
        assert!(
            matches!(&e, ConfigError::BadValue { key: k, message, .. } if k == key && message.contains(needle)),
            "{text}: {e}"
        );
    }

    let syntax = TempFile::new("syntax.toml", b"listen = \n");
    let e = err(&["--config", syntax.path()]);
    assert!(matches!(e, ConfigError::ConfigFileSyntax { .. }), "{e}");
    assert!(e.to_string().contains("line 1"), "{e}");

    let duplicate = TempFile::new("dup.toml", b"shards = 1\nshards = 2\n");
    assert!(matches!(
        err(&["--config", duplicate.path()]),
        ConfigError::ConfigFileSyntax { .. }
    ));

    let missing = "/nonexistent/sluice/config.toml";
    let e = err(&["--config", missing]);
    assert!(matches!(e, ConfigError::ReadConfigFile { .. }), "{e}");
    assert!(e.to_string().contains(missing), "{e}");

    let huge = TempFile::new("huge.toml", &vec![b'#'; CONFIG_FILE_BYTES_MAX as usize + 1]);
    assert!(matches!(
        err(&["--config", huge.path()]),
        ConfigError::ConfigFileTooLarge { .. }
    ));
}

#[test]
fn config_file_errors_give_the_line_and_column() {
    let bad_duration = TempFile::new(
        "parsecs.toml",
        b"# a broker\nlisten = \"127.0.0.1:7171\"\nhello_timeout = \"10 parsecs\"\n",
    );
    let e = err(&["--config", bad_duration.path()]);
    let message = e.to_string();
    assert!(
        matches!(&e, ConfigError::BadValue { key, at: Position { line: 3, column: 17 }, .. } if key == "hello_timeout"),
        "{message}"
    );
    assert!(
        message.contains(bad_duration.path())
            && message.contains("line 3, column 17")
            && message.contains("`hello_timeout`")
            && message.contains("`parsecs` in `10 parsecs` is not a unit"),
        "{message}"
    );

    // A wrong type: the value's position, after a multi-byte character
    // (columns count characters).
    let wrong_type = TempFile::new(
        "type.toml",
        "log = \"é\"\n  insecure   = \"yes\"\n".as_bytes(),
    );
    let e = err(&["--config", wrong_type.path()]);
    assert!(
        matches!(&e, ConfigError::BadValue { key, at: Position { line: 2, column: 16 }, message, .. }
            if key == "insecure" && message.contains("true or false")),
        "{e}"
    );
    let wide = TempFile::new("wide.toml", "log = \"é\" ; shards = 1\n".as_bytes());
    assert!(matches!(
        err(&["--config", wide.path()]),
        ConfigError::ConfigFileSyntax {
            at: Position {
                line: 1,
                column: 11
            },
            ..
        }
    ));

    // An unknown key: the key's position.
    let unknown = TempFile::new(
        "unknown.toml",
        b"shards = 1\n\n   visibility_timeout = \"30s\"\n",
    );
    let e = err(&["--config", unknown.path()]);
    assert!(
        matches!(&e, ConfigError::UnknownKey { key, at: Position { line: 3, column: 4 }, .. } if key == "visibility_timeout"),
        "{e}"
    );
    assert!(e.to_string().contains("line 3, column 4"), "{e}");

    // A bad size in a table-free file written as an integer that is too
    // large for the setting's parser.
    let size = TempFile::new("size.toml", b"frame_bytes_max = \"1.5B\"\n");
    let e = err(&["--config", size.path()]);
    assert!(
        e.to_string().contains("line 1, column 19")
            && e.to_string().contains("whole number of bytes"),
        "{e}"
    );
}

#[test]
fn decimal_and_short_forms_in_flags_variables_and_file() {
    let want = |c: &Config| {
        assert_eq!(c.frame_timeout, Duration::from_millis(1500));
        assert_eq!(c.idle_spin, Duration::from_micros(250));
        assert_eq!(c.unsent_bytes_max, 3 << 19);
        assert_eq!(c.frame_bytes_max, 1 << 20);
    };
    want(&ok(&[
        "--frame-timeout=1.5s",
        "--idle-spin=250us",
        "--unsent-bytes-max=1.5MiB",
        "--frame-bytes-max=1M",
    ]));
    want(
        &config_env(
            &[],
            &[
                ("SLUICE_FRAME_TIMEOUT", "1s 500ms"),
                ("SLUICE_IDLE_SPIN", "0.25ms"),
                ("SLUICE_UNSENT_BYTES_MAX", "1.5M"),
                ("SLUICE_FRAME_BYTES_MAX", "1024KiB"),
            ],
        )
        .expect("valid environment"),
    );
    let file = TempFile::new(
        "forms.toml",
        b"frame_timeout = \"0.025m\"\nidle_spin = \"250000ns\"\n\
          unsent_bytes_max = 1572864\nframe_bytes_max = \"0.0009765625GiB\"\n",
    );
    want(&ok(&["--config", file.path()]));
}

#[test]
fn listen_takes_a_sluice_url_too() {
    assert_eq!(
        ok(&["--listen=sluice://127.0.0.1:7000"]).listen,
        sock("127.0.0.1:7000")
    );
    assert_eq!(ok(&["--listen=SLUICE://[::1]:0/"]).listen, sock("[::1]:0"));
    let file = TempFile::new("listen.toml", b"listen = \"sluice://localhost:7001\"\n");
    assert_eq!(
        ok(&["--config", file.path()]).listen,
        sock("127.0.0.1:7001")
    );
    for bad in ["redis://127.0.0.1:1", "sluice://", "sluice://127.0.0.1"] {
        assert!(raw(&["--listen", bad], &[]).is_err(), "{bad}");
    }
}

#[test]
fn a_relative_token_path_in_a_config_file_is_beside_the_file() {
    let token = TempFile::new("beside-token", TOKEN.as_bytes());
    let name = token
        .0
        .file_name()
        .and_then(|n| n.to_str())
        .expect("UTF-8 name");
    let file = TempFile::new(
        "relative.toml",
        format!("token_file = {}\n", quoted(name)).as_bytes(),
    );
    let c = ok(&["--config", file.path()]);
    assert_eq!(c.auth_token.expect("token read").path(), token.0.as_path());
}

#[test]
fn a_relative_snapshot_path_in_a_config_file_is_beside_the_file() {
    let file = TempFile::new("snapshot.toml", b"snapshot = \"state/sluice.snapshot\"\n");
    let c = ok(&["--config", file.path()]);
    let folder = file.0.parent().expect("a folder");
    assert_eq!(c.snapshot, Some(folder.join("state/sluice.snapshot")));
    assert_eq!(ok(&[]).snapshot, None);
    let bad = TempFile::new("snapshot-bad.toml", b"snapshot = 3\n");
    assert!(
        err(&["--config", bad.path()])
            .to_string()
            .contains("snapshot")
    );
}

#[test]
fn check_snapshot_is_an_action_not_a_setting() {
    let r = raw(&["--check-snapshot", "/tmp/x"], &[]).expect("parses");
    assert_eq!(r.check_snapshot.as_deref(), Some(Path::new("/tmp/x")));
}

fn assert_out_of_range(args: &[&str], flag: &str, min: &str, max: &str) {
    let e = err(args);
    match &e {
        ConfigError::OutOfRange {
            flag: f,
            min: lo,
            max: hi,
            ..
        } => {
            assert_eq!((*f, lo.as_str(), hi.as_str()), (flag, min, max), "{args:?}");
        }
        other => panic!("{args:?}: expected out of range, got {other}"),
    }
    assert!(e.to_string().starts_with(&format!("--{flag} is ")), "{e}");
}

#[test]
fn every_range_is_checked() {
    let cases: &[(&[&str], &str, &str, &str)] = &[
        (&["--shards=0"], "shards", "1", "64"),
        (&["--idle-spin=11ms"], "idle-spin", "0s", "10ms"),
        (&["--shards=65"], "shards", "1", "64"),
        (&["--max-connections=0"], "max-connections", "1", "1000000"),
        (
            &["--max-connections=1000001"],
            "max-connections",
            "1",
            "1000000",
        ),
        (
            &["--frame-bytes-max=4095"],
            "frame-bytes-max",
            "4KiB",
            "64MiB",
        ),
        (
            &["--frame-bytes-max=65537KiB"],
            "frame-bytes-max",
            "4KiB",
            "64MiB",
        ),
        (
            &["--hello-frame-bytes-max=1KiB"],
            "hello-frame-bytes-max",
            "2KiB",
            "64MiB",
        ),
        (&["--hello-timeout=0"], "hello-timeout", "10ms", "1h"),
        (&["--hello-timeout=2h"], "hello-timeout", "10ms", "1h"),
        (&["--frame-timeout=9ms"], "frame-timeout", "10ms", "1h"),
        (&["--frame-timeout=1h1ns"], "frame-timeout", "10ms", "1h"),
        (
            &["--requests-in-flight-max=0"],
            "requests-in-flight-max",
            "1",
            "65536",
        ),
        (
            &["--requests-in-flight-max=65537"],
            "requests-in-flight-max",
            "1",
            "65536",
        ),
        (
            &["--unsent-bytes-max=2KiB"],
            "unsent-bytes-max",
            "4KiB",
            "1GiB",
        ),
        (
            &["--unsent-bytes-max=2GiB"],
            "unsent-bytes-max",
            "4KiB",
            "1GiB",
        ),
        (
            &["--unsent-bytes-total-max=2TiB"],
            "unsent-bytes-total-max",
            "4KiB",
            "1TiB",
        ),
        (&["--memory-max=0"], "memory-max", "1MiB", "1024TiB"),
        (&["--memory-max=2048TiB"], "memory-max", "1MiB", "1024TiB"),
        (&["--queues-max=0"], "queues-max", "1", "1000000"),
        (&["--queues-max=1000001"], "queues-max", "1", "1000000"),
        (&["--shutdown-timeout=61m"], "shutdown-timeout", "0s", "1h"),
    ];
    for (args, flag, min, max) in cases {
        assert_out_of_range(args, flag, min, max);
    }
    // The bounds themselves are accepted.
    let c = ok(&[
        "--shards=64",
        "--max-connections=1",
        "--frame-bytes-max=64MiB",
        "--hello-frame-bytes-max=2KiB",
        "--hello-timeout=10ms",
        "--frame-timeout=1h",
        "--requests-in-flight-max=65536",
        "--unsent-bytes-max=1GiB",
        "--unsent-bytes-total-max=1TiB",
        "--memory-max=1MiB",
        "--queues-max=1000000",
        "--shutdown-timeout=0",
    ]);
    assert_eq!((c.shards, c.frame_bytes_max), (64, 64 << 20));
    assert_eq!(c.shutdown_timeout, Duration::ZERO);
}

#[test]
fn relations_between_limits_are_checked() {
    let e = err(&["--frame-bytes-max=4KiB", "--hello-frame-bytes-max=8KiB"]);
    assert!(matches!(e, ConfigError::HelloFrameAboveFrame { .. }), "{e}");
    assert!(
        e.to_string().contains("(8KiB)") && e.to_string().contains("(4KiB)"),
        "{e}"
    );
    ok(&["--frame-bytes-max=4KiB", "--hello-frame-bytes-max=4KiB"]);

    let e = err(&["--frame-bytes-max=8MiB"]);
    assert!(
        matches!(e, ConfigError::UnsentBelowFrame { .. }),
        "default 4MiB < 8MiB: {e}"
    );
    ok(&["--frame-bytes-max=8MiB", "--unsent-bytes-max=8MiB"]);

    let e = err(&["--unsent-bytes-total-max=2MiB"]);
    assert!(
        matches!(e, ConfigError::UnsentTotalBelowPerConnection { .. }),
        "{e}"
    );
}

#[test]
fn a_public_address_needs_a_token_or_insecure() {
    for listen in [
        "0.0.0.0:7171",
        "10.1.2.3:7171",
        "[::]:7171",
        "[::ffff:10.0.0.1]:1",
    ] {
        let e = err(&["--listen", listen]);
        assert!(
            matches!(e, ConfigError::InsecureListen { .. }),
            "{listen}: {e}"
        );
        let message = e.to_string();
        assert!(
            message.contains("--token-file") && message.contains("--insecure"),
            "{message}"
        );
        assert!(ok(&["--listen", listen, "--insecure"]).insecure);
    }
    for listen in [
        "127.0.0.1:1",
        "127.8.9.10:1",
        "[::1]:1",
        "[::ffff:127.0.0.1]:1",
        "localhost:1",
    ] {
        ok(&["--listen", listen]);
    }
    let token = TempFile::new("token", TOKEN.as_bytes());
    let c = ok(&["--listen=0.0.0.0:7171", "--token-file", token.path()]);
    assert!(c.auth_token.is_some() && !c.insecure);
}

#[test]
fn token_file_problems() {
    let missing = "/nonexistent/sluice/token";
    let e = err(&["--token-file", missing]);
    assert!(matches!(e, ConfigError::ReadTokenFile { .. }), "{e}");
    assert!(e.to_string().contains(missing), "{e}");

    let folder = std::env::temp_dir();
    let folder = folder.to_str().expect("UTF-8 temp folder");
    assert!(matches!(
        err(&["--token-file", folder]),
        ConfigError::ReadTokenFile { .. }
    ));

    for content in [&b""[..], b"\n", b"\r\n\n"] {
        let empty = TempFile::new("empty-token", content);
        let e = err(&["--token-file", empty.path()]);
        assert!(
            matches!(e, ConfigError::TokenFileEmpty { .. }),
            "{content:?}: {e}"
        );
        assert!(e.to_string().contains(empty.path()), "{e}");
    }

    let max = wire::AUTH_TOKEN_BYTES_MAX;
    let longest = TempFile::new("longest", format!("{}\r\n", "x".repeat(max)).as_bytes());
    let c = ok(&["--token-file", longest.path()]);
    assert_eq!(c.auth_token.expect("read").as_bytes().len(), max);
    for content in [format!("{}\n", "x".repeat(max + 1)), "x".repeat(100_000)] {
        let long = TempFile::new("long", content.as_bytes());
        assert!(matches!(
            err(&["--token-file", long.path()]),
            ConfigError::TokenTooLong { .. }
        ));
    }

    let inner = TempFile::new("inner", b"a b\nc\n\n");
    let c = ok(&["--token-file", inner.path()]);
    assert_eq!(
        c.auth_token.expect("read").as_bytes(),
        b"a b\nc",
        "only trailing line ends go"
    );
}

#[test]
fn the_token_is_compared_and_never_shown() {
    let token = TempFile::new("token", format!("{TOKEN}\n").as_bytes());
    let c = ok(&["--token-file", token.path()]);
    let t = c.auth_token.as_ref().expect("read");
    assert!(t.matches(TOKEN.as_bytes()));
    assert!(!t.matches(b"s3cr3t-t0ken-valuX"));
    assert!(!t.matches(b"s3cr3t"));
    assert!(!t.matches(b""));
    let shown = format!("{c}\n{c:?}");
    assert!(!shown.contains(TOKEN), "{shown}");
    assert!(shown.contains(token.path()), "{shown}");
}

#[test]
fn metrics_and_listen_addresses() {
    assert_eq!(ok(&["--metrics-addr=off"]).metrics, None);
    assert_eq!(ok(&["--metrics-addr=OFF"]).metrics, None);
    assert_eq!(
        ok(&["--metrics-addr=127.0.0.1:0"]).metrics,
        Some(sock("127.0.0.1:0"))
    );
    let e = err(&["--listen=127.0.0.1:9000", "--metrics-addr=127.0.0.1:9000"]);
    assert!(matches!(e, ConfigError::MetricsOnListenAddr { .. }), "{e}");
    // Port 0 twice means two different free ports.
    ok(&["--listen=127.0.0.1:0", "--metrics-addr=127.0.0.1:0"]);
    assert_eq!(
        ok(&["--listen=localhost:8000"]).listen,
        sock("127.0.0.1:8000")
    );
}

#[test]
fn log_filters_are_checked() {
    ok(&["--log=off"]);
    ok(&["--log=sluice_broker::server=trace,info"]);
    for bad in ["", "  ", "info,sluice=loud"] {
        let e = err(&["--log", bad]);
        assert!(
            matches!(e, ConfigError::BadLogFilter { .. }),
            "{bad:?}: {e}"
        );
    }
}

#[test]
fn help_documents_precedence_and_every_variable() {
    let help = RawArgs::command().render_long_help().to_string();
    // clap wraps to the terminal: compare with whitespace folded.
    let help: String = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains("Precedence: flag, then environment, then config file"),
        "{help}"
    );
    assert!(help.contains("RUST_LOG is not read"), "{help}");
    assert!(
        help.contains("has no unit") || help.contains("plain number is refused"),
        "{help}"
    );
    let command = RawArgs::command();
    let mut keys = Vec::new();
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        // Actions, not settings.
        if matches!(long, "help" | "version" | "check-snapshot") {
            continue;
        }
        let env = arg.get_env().and_then(|e| e.to_str()).unwrap_or_default();
        let want = format!("SLUICE_{}", long.replace('-', "_").to_ascii_uppercase());
        assert_eq!(env, want, "--{long}");
        assert!(help.contains(&want), "{want} not in help");
        assert!(
            long == "config"
                || arg
                    .get_help()
                    .is_some_and(|h| h.to_string().contains("default")),
            "--{long} help names its default"
        );
        if long != "config" {
            keys.push(long.replace('-', "_"));
        }
    }
    assert_eq!(keys, CONFIG_FILE_KEYS, "config file keys follow the flags");
}

#[test]
fn the_help_texts_name_the_real_defaults() {
    let c = ok(&[]);
    let help = RawArgs::command().render_help().to_string();
    for shown in [
        format!("[default: {}]", c.listen),
        format!("[default: {}]", c.io),
        format!("[default: {}]", c.metrics.expect("on by default")),
        format!("[default: {}]", c.connections_max),
        format!("[default: {}]", format_bytes(c.frame_bytes_max.into())),
        format!(
            "[default: {}]",
            format_bytes(c.hello_frame_bytes_max.into())
        ),
        format!("[default: {}]", format_duration(c.hello_timeout)),
        format!("[default: {}]", format_duration(c.frame_timeout)),
        format!("[default: {}]", c.requests_in_flight_max),
        format!("[default: {}]", format_bytes(c.unsent_bytes_max)),
        format!("[default: {}]", format_bytes(c.unsent_bytes_total_max)),
        format!("[default: {}]", c.queues_max),
        format!("[default: {}]", c.log_filter),
        format!("[default: {}]", format_duration(c.shutdown_timeout)),
    ] {
        // clap may wrap lines: compare with whitespace folded.
        let folded: String = help.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(folded.contains(&shown), "{shown} not in help:\n{help}");
    }
}

#[test]
fn the_effective_configuration_reads_back_as_a_config_file() {
    let token = TempFile::new("token", TOKEN.as_bytes());
    let args = every_flag(token.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for c in [
        ok(&[]),
        ok(&args),
        ok(&["--metrics-addr=off", "--log=a\"b=debug"]),
    ] {
        let rendered = c.to_string();
        let file = TempFile::new("effective.toml", rendered.as_bytes());
        let again = ok(&["--config", file.path()]);
        assert_eq!(
            again.to_string(),
            rendered.replace("  # half of physical memory (8GiB)", "")
        );
    }
    let rendered = ok(&[]).to_string();
    assert!(
        rendered.contains("frame_bytes_max = \"1MiB\"\n"),
        "{rendered}"
    );
    assert!(rendered.contains("memory_max = \"4GiB\"  # half of physical memory (8GiB)\n"));
    assert!(rendered.contains("# token_file: none"), "{rendered}");
}

/// The printed configuration is written by hand from the validated values;
/// this keeps it in step with the one declaration of the settings.
#[test]
fn the_effective_configuration_names_every_setting() {
    let token = TempFile::new("token", TOKEN.as_bytes());
    let args = every_flag(token.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for c in [ok(&[]), ok(&args)] {
        let rendered = c.to_string();
        for key in Settings::KEYS {
            assert!(
                rendered.lines().any(|l| l.starts_with(&format!("{key} = "))
                    || l.strip_prefix("# ")
                        .and_then(|c| c.split_once(':'))
                        .is_some_and(|(keys, _)| keys.split(", ").any(|k| k == *key))),
                "`{key}` is not in the effective configuration:\n{rendered}"
            );
        }
    }
}

#[test]
fn cpu_lists() {
    assert_eq!(parse_cpus("auto"), Ok(CpuPlacement::Auto));
    assert_eq!(parse_cpus(" NONE "), Ok(CpuPlacement::None));
    assert_eq!(parse_cpus("3"), Ok(CpuPlacement::List(vec![3])));
    assert_eq!(
        parse_cpus("4,0-2"),
        Ok(CpuPlacement::List(vec![0, 1, 2, 4]))
    );
    for bad in ["", "x", "1,", "2-1", "1,1", "0-1,1", "-1", "1024", "1-"] {
        let e = parse_cpus(bad).expect_err(bad);
        assert!(e.contains("is not a CPU list"), "{bad}: {e}");
    }
    // A list sets the default shard count, and must cover --shards.
    assert_eq!(ok(&["--cpus", "2-3"]).shards, 2);
    assert_eq!(ok(&["--cpus", "2-4", "--shards", "2"]).shards, 2);
    let e = err(&["--cpus", "1", "--shards", "2"]);
    assert!(
        matches!(e, ConfigError::FewerCpusThanShards { .. }),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "--cpus 1 lists 1 CPUs for 2 shards: list one CPU per shard, lower --shards, \
         or use --cpus auto or none"
    );
    // auto and none keep the host's default.
    assert_eq!(ok(&["--cpus", "none"]).shards, 4);
}

#[test]
fn tls_takes_a_certificate_and_its_key_from_flags_environment_or_file() {
    let pki = crate::testing::TestPki::generate();
    let (cert, key, ca) = (
        pki.server_cert().to_string_lossy().into_owned(),
        pki.server_key().to_string_lossy().into_owned(),
        pki.ca_pem().to_string_lossy().into_owned(),
    );
    let c = ok(&["--tls-cert", &cert, "--tls-key", &key]);
    let tls = c.tls.as_ref().expect("TLS on");
    assert_eq!(
        (tls.cert.to_str(), tls.client_ca.as_ref()),
        (Some(&*cert), None)
    );
    let env = [
        ("SLUICE_TLS_CERT", cert.as_str()),
        ("SLUICE_TLS_KEY", key.as_str()),
        ("SLUICE_TLS_CLIENT_CA", ca.as_str()),
    ];
    let c = config_env(&[], &env).expect("TLS from the environment");
    assert!(c.tls.as_ref().is_some_and(|t| t.client_ca.is_some()));
    // The effective configuration names the files and parses back.
    let rendered = c.to_string();
    assert!(
        rendered.contains(&format!("tls_cert = {}", quoted(&cert))),
        "{rendered}"
    );
    let file = TempFile::new("tls.toml", rendered.as_bytes());
    let again = ok(&["--config", file.path()]);
    assert_eq!(again.tls.map(|t| t.key), c.tls.map(|t| t.key));
    // Relative paths in a file are beside the file.
    let file = pki.dir().join("sluice.toml");
    std::fs::write(
        &file,
        "tls_cert = \"server.pem\"\ntls_key = \"server.key\"\n",
    )
    .unwrap();
    let c = ok(&["--config", file.to_str().unwrap()]);
    assert_eq!(c.tls.map(|t| t.cert), Some(pki.server_cert()));
    assert!(
        ok(&[])
            .to_string()
            .contains("# tls_cert, tls_key, tls_client_ca: none")
    );
}

#[test]
fn tls_settings_that_cannot_work_are_refused_naming_the_flag() {
    let pki = crate::testing::TestPki::generate();
    let (cert, key) = (
        pki.server_cert().to_string_lossy().into_owned(),
        pki.server_key().to_string_lossy().into_owned(),
    );
    assert!(matches!(
        err(&["--tls-cert", &cert]),
        ConfigError::TlsIncomplete {
            missing: "--tls-key",
            ..
        }
    ));
    assert!(matches!(
        err(&["--tls-key", &key]),
        ConfigError::TlsIncomplete {
            missing: "--tls-cert",
            ..
        }
    ));
    assert!(matches!(
        err(&["--tls-client-ca", &cert]),
        ConfigError::TlsIncomplete { .. }
    ));
    // A key file as the certificate, a certificate as the key, a missing
    // file, a key of another certificate.
    let e = err(&["--tls-cert", &key, "--tls-key", &key]);
    assert!(e.to_string().starts_with("--tls-cert "), "{e}");
    let e = err(&["--tls-cert", &cert, "--tls-key", &cert]);
    assert!(e.to_string().starts_with("--tls-key "), "{e}");
    let e = err(&["--tls-cert", "/nonexistent.pem", "--tls-key", &key]);
    assert!(e.to_string().contains("/nonexistent.pem"), "{e}");
    let (client_cert, _) = pki.client_cert_and_key();
    let e = err(&[
        "--tls-cert",
        client_cert.to_str().unwrap(),
        "--tls-key",
        &key,
    ]);
    assert!(e.to_string().contains("does not fit"), "{e}");
}

#[test]
fn the_sqs_door_defaults_turns_off_and_takes_its_settings_from_every_source() {
    let c = ok(&[]);
    let sqs = c.sqs.expect("open by default");
    assert_eq!(sqs.listen, sock("127.0.0.1:9324"));
    assert_eq!(sqs.account, "000000000000");
    assert_eq!(sqs.limits, sluice_sqs::Limits::Strict);
    assert_eq!(ok(&["--sqs-listen=off"]).sqs, None);
    let c = ok(&[
        "--sqs-listen=localhost:0",
        "--sqs-account=123456789012",
        "--sqs-limits=relaxed",
    ]);
    let sqs = c.sqs.expect("open");
    assert_eq!(sqs.listen, sock("127.0.0.1:0"));
    assert_eq!(sqs.account, "123456789012");
    assert_eq!(sqs.limits, sluice_sqs::Limits::Relaxed);
    let env = [("SLUICE_SQS_LISTEN", "off")];
    assert_eq!(config_env(&[], &env).unwrap().sqs, None);
    let file = TempFile::new(
        "sqs.toml",
        b"sqs_listen = \"127.0.0.1:9400\"\nsqs_account = \"111122223333\"\nsqs_limits = \"relaxed\"\n",
    );
    let sqs = ok(&["--config", file.path()]).sqs.expect("open");
    assert_eq!(
        (sqs.listen, sqs.account.as_str(), sqs.limits),
        (
            sock("127.0.0.1:9400"),
            "111122223333",
            sluice_sqs::Limits::Relaxed
        )
    );
    // The printed configuration reads back as the same settings.
    let printed = ok(&["--config", file.path()]).to_string();
    assert!(
        printed.contains("sqs_listen = \"127.0.0.1:9400\""),
        "{printed}"
    );
    assert!(
        ok(&["--sqs-listen=off"])
            .to_string()
            .contains("sqs_listen = \"off\"")
    );
}

#[test]
fn bad_sqs_settings_are_refused() {
    for bad in [
        &["--sqs-account=12345"][..],
        &["--sqs-account=abcdefghijkl"],
        &["--sqs-limits=loose"],
        &["--sqs-listen=example.com:9324"],
    ] {
        assert!(raw(bad, &[]).is_err(), "{bad:?} was taken");
    }
    let e = err(&["--listen=127.0.0.1:9500", "--sqs-listen=127.0.0.1:9500"]);
    assert!(matches!(e, ConfigError::SharedAddress { .. }), "{e}");
    let e = err(&[
        "--metrics-addr=127.0.0.1:9501",
        "--sqs-listen=127.0.0.1:9501",
    ]);
    assert!(matches!(e, ConfigError::SharedAddress { .. }), "{e}");
    // Port 0 for all three is three free ports.
    ok(&[
        "--listen=127.0.0.1:0",
        "--metrics-addr=127.0.0.1:0",
        "--sqs-listen=127.0.0.1:0",
    ]);
    // Off loopback the door, which checks no signature, needs --insecure,
    // even when the binary port has a token.
    let e = err(&["--sqs-listen=0.0.0.0:9324"]);
    assert!(matches!(e, ConfigError::InsecureSqsListen { .. }), "{e}");
    assert!(e.to_string().contains("--insecure"), "{e}");
    let sqs = ok(&["--sqs-listen=0.0.0.0:9324", "--insecure"])
        .sqs
        .expect("open");
    assert_eq!(sqs.listen, sock("0.0.0.0:9324"));
}

#[test]
fn sqs_credentials_are_read_checked_and_open_the_door_off_loopback() {
    let good = TempFile::new(
        "sqs-credentials",
        b"# key secret account\nAKIDONE secret-one 111122223333\nAKIDTWO secret-two 222233334444 # two\n",
    );
    let c = ok(&["--sqs-credentials", good.path()]);
    let (path, creds) = c
        .sqs
        .as_ref()
        .and_then(|s| s.credentials.clone())
        .expect("read");
    assert_eq!(path.to_str(), Some(good.path()));
    assert_eq!(creds.len(), 2);
    assert_eq!(
        creds.get("AKIDTWO").map(|k| k.account.as_str()),
        Some("222233334444")
    );
    // Printed without the secrets.
    let printed = c.to_string();
    assert!(printed.contains("2 access key(s)"), "{printed}");
    assert!(!printed.contains("secret-one"), "{printed}");
    // Signatures checked: off loopback without --insecure.
    let sqs = ok(&[
        "--sqs-listen=0.0.0.0:9324",
        "--sqs-credentials",
        good.path(),
    ])
    .sqs
    .expect("open");
    assert_eq!(sqs.listen, sock("0.0.0.0:9324"));
    let bad = TempFile::new("sqs-credentials-bad", b"AKIDONE secret-one\n");
    let e = err(&["--sqs-credentials", bad.path()]);
    assert!(matches!(e, ConfigError::SqsCredentials { .. }), "{e}");
    assert!(e.to_string().contains("line 1"), "{e}");
    let e = err(&["--sqs-credentials", "/nonexistent/sluice-credentials"]);
    assert!(matches!(e, ConfigError::SqsCredentials { .. }), "{e}");
}

#[test]
fn durability_needs_its_folder_and_the_folder_needs_a_durability() {
    let c = ok(&[]);
    assert_eq!(c.durability, Durability::None);
    assert_eq!(c.log_dir, None);
    assert_eq!(c.log_sync_interval, Duration::from_millis(100));
    let c = ok(&[
        "--durability",
        "always",
        "--log-dir",
        "/var/lib/sluice/log",
        "--log-sync-interval",
        "20ms",
    ]);
    assert_eq!(c.durability, Durability::Always);
    assert_eq!(c.log_dir.as_deref(), Some(Path::new("/var/lib/sluice/log")));
    assert_eq!(c.log_sync_interval, Duration::from_millis(20));
    assert!(c.to_string().contains("durability = \"always\"\n"));
    let e = err(&["--durability", "batch"]).to_string();
    assert!(e.contains("--log-dir PATH"), "{e}");
    let e = err(&["--log-dir", "/tmp/x"]).to_string();
    assert!(e.contains("--durability batch or always"), "{e}");
    let e = err(&[
        "--durability",
        "batch",
        "--log-dir",
        "/tmp/x",
        "--snapshot",
        "/tmp/s",
    ])
    .to_string();
    assert!(e.contains("--snapshot is for --durability none"), "{e}");
    let e = raw(&["--durability", "sometimes"], &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("none, batch or always"), "{e}");
    for bad in ["0s", "11s", "500us"] {
        let e = err(&["--log-sync-interval", bad]).to_string();
        assert!(e.contains("log-sync-interval"), "{bad}: {e}");
    }
}
