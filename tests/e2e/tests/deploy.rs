//! Deployment files: the systemd units pass `systemd-analyze verify` and agree with the configuration,
//! `deploy/install.sh` puts every file in its place without overwriting an operator's configuration and
//! can be run again, and the Prometheus files use documented metrics and the units' port scheme.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use dq_harness::bin_dir;

/// The unit files in `systemd/`, and the name each is verified under (an instance for templates).
const UNITS: [(&str, &str); 4] = [
    ("dq-checker.service", "dq-checker.service"),
    ("dq-server.service", "dq-server.service"),
    ("dq-timer@.service", "dq-timer@9801.service"),
    ("dq-consumer@.service", "dq-consumer@9901.service"),
];

/// The binaries `deploy/install.sh` installs.
const BINARIES: [&str; 6] = ["dq-server", "dq-timer", "dq-consumer", "dq-checker", "dq-bench", "dq"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

fn read(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn show(what: &str, out: &Output) {
    eprintln!(
        "---- {what}: {} ----\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn units_pass_systemd_analyze_verify() {
    if Command::new("systemd-analyze").arg("--version").output().is_err() {
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    }
    // verify insists that ExecStart exists: point it at the built binaries.
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["verify".to_string()];
    for (file, verify_as) in UNITS {
        let mut execs = 0;
        let text: String = read(repo().join("systemd").join(file))
            .lines()
            .map(|line| match line.strip_prefix("ExecStart=/usr/local/bin/") {
                Some(rest) => {
                    execs += 1;
                    let name = rest.split_whitespace().next().expect("binary name");
                    let bin = bin_dir().join(name);
                    assert!(
                        bin.exists(),
                        "{} is missing: build the workspace's binaries first",
                        bin.display()
                    );
                    format!("ExecStart={}{}", bin.display(), &rest[name.len()..])
                }
                None => line.to_string(),
            })
            .map(|line| line + "\n")
            .collect();
        assert_eq!(execs, 1, "{file}: one ExecStart=/usr/local/bin/…");
        std::fs::write(dir.path().join(file), text).unwrap();
        args.push(dir.path().join(verify_as).display().to_string());
    }
    let out = Command::new("systemd-analyze").args(&args).output().unwrap();
    show("systemd-analyze verify", &out);
    assert!(out.status.success(), "systemd-analyze verify failed");
    // An unknown key or a bad value is only a warning ("<file>:<line>: … ignoring"), with status 0.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let prefix = dir.path().display().to_string();
    let about_units: Vec<&str> = stderr.lines().filter(|l| l.starts_with(&prefix)).collect();
    assert!(
        about_units.is_empty(),
        "systemd ignores unit settings: {about_units:#?}"
    );
}

/// The value of `key=` in a unit file (the last one, as systemd reads it).
fn unit_value<'a>(unit: &'a str, key: &str) -> Option<&'a str> {
    unit.lines().rev().find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

#[test]
fn units_match_the_binaries_and_the_configuration() {
    let grace_ms: u64 = read(repo().join("deploy/dq.toml"))
        .lines()
        .find_map(|l| l.trim().strip_prefix("grace_ms")?.trim().strip_prefix('='))
        .and_then(|v| v.split('#').next()?.trim().parse().ok())
        .expect("shutdown.grace_ms in deploy/dq.toml");
    for (file, _) in UNITS {
        let unit = read(repo().join("systemd").join(file));
        let binary = file.split(['@', '.']).next().unwrap();
        let want = [
            ("Type", "notify"),
            ("NotifyAccess", "main"),
            ("KillSignal", "SIGTERM"),
            ("Restart", "on-failure"),
            ("User", "dq"),
            ("Group", "dq"),
            ("EnvironmentFile", "-/etc/dq/dq.env"),
        ];
        for (key, value) in want {
            assert_eq!(unit_value(&unit, key), Some(value), "{file}: {key}");
        }
        let exec = format!("/usr/local/bin/{binary} --config /etc/dq/dq.toml");
        assert_eq!(unit_value(&unit, "ExecStart"), Some(exec.as_str()), "{file}: ExecStart");
        assert!(unit_value(&unit, "WatchdogSec").is_some(), "{file}: WatchdogSec");
        let stop: u64 = unit_value(&unit, "TimeoutStopSec").unwrap().parse().unwrap();
        assert!(
            stop * 1000 > grace_ms,
            "{file}: TimeoutStopSec={stop} must exceed shutdown.grace_ms={grace_ms}, or a drain is killed"
        );
        // Templates: the instance name is the metrics port.
        let listen = unit_value(&unit, "Environment");
        if file.contains('@') {
            assert_eq!(listen, Some("DQ__METRICS__LISTEN=127.0.0.1:%i"), "{file}");
        } else {
            assert_eq!(listen, None, "{file}");
        }
    }
}

/// Every file under `root`: relative path → (mode, contents).
fn snapshot(root: &Path) -> BTreeMap<String, (u32, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (u32, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
                let rel = path.strip_prefix(root).unwrap().display().to_string();
                out.insert(rel, (mode, std::fs::read(&path).unwrap()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Runs `deploy/install.sh --no-build` into `destdir`, with the binaries of `bins`.
fn install(destdir: &Path, bins: &Path) -> Output {
    let out = Command::new("bash")
        .arg(repo().join("deploy/install.sh"))
        .arg("--no-build")
        .env("DESTDIR", destdir)
        .env("DQ_BIN_DIR", bins)
        .output()
        .unwrap();
    show("deploy/install.sh", &out);
    out
}

/// Small stand-ins for the binaries: install.sh copies them without looking inside, and the real ones
/// weigh hundreds of MB in a debug build.
fn stub_binaries(dir: &Path, version: &str) {
    for b in BINARIES {
        let path = dir.join(b);
        std::fs::write(&path, format!("#!/bin/sh\necho {b} {version}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[test]
fn install_sh_stages_every_file_and_keeps_the_operators_configuration() {
    let bins = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();

    // Missing binaries: refused before anything is installed.
    let out = install(root.path(), bins.path());
    assert!(!out.status.success());
    assert!(snapshot(root.path()).is_empty(), "nothing installed without binaries");

    stub_binaries(bins.path(), "v1");
    let out = install(root.path(), bins.path());
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    for skipped in [
        "skipped creating the system user",
        "skipped chown",
        "skipped systemctl daemon-reload",
    ] {
        assert!(stdout.contains(skipped), "says it {skipped}");
    }
    assert!(
        stdout.contains("systemctl enable --now dq-server"),
        "prints the next steps"
    );

    let files = snapshot(root.path());
    let mut want = BTreeSet::new();
    for b in BINARIES {
        let path = format!("usr/local/bin/{b}");
        let (mode, body) = &files[&path];
        assert_eq!(*mode, 0o755, "{path}");
        assert_eq!(body, &std::fs::read(bins.path().join(b)).unwrap(), "{path}");
        want.insert(path);
    }
    for (unit, _) in UNITS {
        let path = format!("etc/systemd/system/{unit}");
        let (mode, body) = &files[&path];
        assert_eq!(*mode, 0o644, "{path}");
        assert_eq!(
            body,
            &std::fs::read(repo().join("systemd").join(unit)).unwrap(),
            "{path}"
        );
        want.insert(path);
    }
    let (mode, body) = &files["etc/dq/dq.toml"];
    assert_eq!(*mode, 0o640);
    assert_eq!(body, &std::fs::read(repo().join("deploy/dq.toml")).unwrap());
    let (mode, body) = &files["etc/dq/dq.env"];
    assert_eq!(*mode, 0o640);
    let settings = String::from_utf8_lossy(body)
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .count();
    assert_eq!(settings, 0, "dq.env starts without settings");
    want.extend(["etc/dq/dq.toml".to_string(), "etc/dq/dq.env".to_string()]);
    assert_eq!(
        files.keys().cloned().collect::<BTreeSet<_>>(),
        want,
        "exactly these files"
    );

    // The operator edits the configuration; a new build comes: binaries and units are replaced, the
    // configuration is not.
    let toml = root.path().join("etc/dq/dq.toml");
    let env = root.path().join("etc/dq/dq.env");
    std::fs::write(&toml, "[redis]\nshards = [\"redis://10.0.0.7:6379\"]\n").unwrap();
    std::fs::write(&env, "DQ__LOG__FORMAT=json\n").unwrap();
    stub_binaries(bins.path(), "v2");
    let out = install(root.path(), bins.path());
    assert!(out.status.success());
    assert_eq!(
        read(&toml),
        "[redis]\nshards = [\"redis://10.0.0.7:6379\"]\n",
        "dq.toml kept"
    );
    assert_eq!(read(&env), "DQ__LOG__FORMAT=json\n", "dq.env kept");
    let after = snapshot(root.path());
    for b in BINARIES {
        assert_eq!(
            read(root.path().join("usr/local/bin").join(b)),
            format!("#!/bin/sh\necho {b} v2\n")
        );
    }
    assert_eq!(after.keys().cloned().collect::<BTreeSet<_>>(), want, "no stray files");

    // Once more with nothing new: nothing changes.
    let out = install(root.path(), bins.path());
    assert!(out.status.success());
    assert_eq!(snapshot(root.path()), after, "a second run changes nothing");
    assert!(String::from_utf8_lossy(&out.stdout).contains("dq-server unchanged"));
}

/// The metric names in `text`: `dq_` followed by `[a-z_]` (after a character that cannot end a name).
fn metric_names(text: &str) -> BTreeSet<String> {
    let bytes = text.as_bytes();
    let mut names = BTreeSet::new();
    for (i, _) in text.match_indices("dq_") {
        if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') {
            continue;
        }
        let len = text[i..]
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(text.len() - i);
        names.insert(text[i..i + len].to_string());
    }
    names
}

#[test]
fn alert_rules_use_documented_metrics() {
    let alerts = read(repo().join("deploy/prometheus/alerts.yml"));
    let docs = read(repo().join("docs/metrics.md"));
    let names = metric_names(&alerts);
    assert!(names.len() >= 5, "found the metrics of the rules: {names:?}");
    for name in &names {
        let base = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        assert!(
            docs.contains(&format!("`{base}`")),
            "alerts.yml uses {name}, but docs/metrics.md does not list `{base}`"
        );
    }
    // Every rule has a duration, a severity and what to do.
    let rules = alerts
        .lines()
        .filter(|l| l.trim_start().starts_with("- alert: "))
        .count();
    assert!(rules > 0);
    for key in ["for: ", "severity: ", "summary: ", "description: "] {
        let n = alerts.lines().filter(|l| l.trim_start().starts_with(key)).count();
        assert_eq!(n, rules, "every alert has {key}");
    }
}

#[test]
fn scrape_targets_follow_the_units_port_scheme() {
    let scrape = read(repo().join("deploy/prometheus/scrape.yml"));
    let mut job = String::new();
    let mut targets: BTreeMap<String, Vec<u16>> = BTreeMap::new();
    for line in scrape.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("- job_name: ") {
            job = name.trim().to_string();
        } else if let Some(list) = line.strip_prefix("- targets: ") {
            for target in list.trim_matches(['[', ']']).split(',') {
                let target = target.trim().trim_matches('"');
                let port = target.rsplit(':').next().unwrap().parse().unwrap();
                targets.entry(job.clone()).or_default().push(port);
            }
        }
    }
    assert_eq!(
        targets.keys().map(String::as_str).collect::<Vec<_>>(),
        ["dq-checker", "dq-consumer", "dq-server", "dq-timer"]
    );
    assert_eq!(targets["dq-server"], [6789]);
    assert_eq!(targets["dq-checker"], [9793]);
    assert!(
        targets["dq-timer"].iter().all(|p| (9801..=9899).contains(p)),
        "{targets:?}"
    );
    assert!(
        targets["dq-consumer"].iter().all(|p| (9901..=9999).contains(p)),
        "{targets:?}"
    );
}
