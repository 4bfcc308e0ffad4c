//! A headless Chromium driven through chromedriver (WebDriver), for the browser tests: a session, the
//! admin login, waiting for a page's text, checking a screenshot and keeping it as a test artefact.
#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dq_harness::{eventually, free_port};
use serde_json::json;

/// A PNG of `width` × `height` (when given) that is not blank: a blank page compresses to a few hundred
/// bytes, one with the page's text and tables does not.
pub fn assert_screenshot(bytes: &[u8], size: Option<(u32, u32)>, what: &str) {
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{what}: not a PNG");
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    if let Some(size) = size {
        assert_eq!((width, height), size, "{what}");
    }
    assert!(
        bytes.len() > 10_000,
        "{what}: the screenshot looks blank ({} bytes)",
        bytes.len()
    );
}

/// chromedriver on a free port in a process group of its own, killed on drop with the Chromium it
/// started (a test that fails before closing its session would otherwise leave Chromium running).
pub struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts chromedriver and opens a headless Chromium session through it.
pub async fn browser(profile: &std::path::Path) -> (Driver, fantoccini::Client) {
    let port = free_port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver runs (scripts/ensure-chromium.sh installs chromium-driver)");
    let driver = Driver(child);
    let url = format!("http://127.0.0.1:{port}");
    eventually(Duration::from_secs(30), "chromedriver answers", || async {
        reqwest::get(format!("{url}/status")).await.is_ok()
    })
    .await;
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        "--window-size=1200,800", format!("--user-data-dir={}", profile.display())]}),
    );
    let client = fantoccini::ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&url)
        .await
        .expect("a WebDriver session in headless Chromium");
    (driver, client)
}

/// Types `token` into the admin login form `client` shows, and sends it.
pub async fn submit_login(client: &fantoccini::Client, token: &str) {
    use fantoccini::Locator;
    let field = client
        .wait()
        .for_element(Locator::Css("input[name=token]"))
        .await
        .unwrap();
    field.send_keys(token).await.unwrap();
    let submit = client.find(Locator::Css("button[type=submit]")).await.unwrap();
    submit.click().await.unwrap();
}

/// Waits until the page `client` shows has loaded and its text holds `text`.
pub async fn wait_for_text(client: &fantoccini::Client, text: &str) {
    eventually(Duration::from_secs(30), &format!("the page shows {text:?}"), || async {
        client.source().await.is_ok_and(|s| s.contains(text))
    })
    .await;
}

/// Keeps `png` as the test artefact `name` (under the tests' temp dir, `browser/`), and returns its path.
pub fn keep_artefact(name: &str, png: &[u8]) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, png).unwrap();
    path
}
