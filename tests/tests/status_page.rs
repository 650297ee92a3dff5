//! The status page on the operator's HTTP port (SPEC `OPS-5`): its data at
//! `/api/status`, what access control lets each caller see there and at
//! `/metrics`, and the page itself loaded in a real browser (headless
//! Chromium, when the machine has it: `.ci/run` installs it and requires
//! it with `LEASEHOLD_REQUIRE_CHROMIUM=1`).

use std::net::SocketAddr;
use std::time::Duration;

use leasehold::{Client, ClientConfig, LockOptions, Rights, Rule, SessionOptions};
use leasehold_server::Config;
use leasehold_tests::fixture::TempDir;
use leasehold_tests::http::{get, get_for};
use leasehold_tests::server::{start_with_http, TestServer};

const OPERATOR_TOKEN: &str = "the operator token of the status page tests";

/// A master with an operator token and its HTTP port, and the operator's
/// client.
async fn master() -> (TestServer, SocketAddr, Client) {
    let config = Config {
        operator_token: Some(OPERATOR_TOKEN.into()),
        min_lease: Duration::from_millis(100),
        ..Config::default()
    };
    let (server, http) = start_with_http(config).await;
    let operator = client(&server, Some(OPERATOR_TOKEN)).await;
    (server, http, operator)
}

async fn client(server: &TestServer, token: Option<&str>) -> Client {
    let config = ClientConfig {
        token: token.map(String::from),
        ..ClientConfig::default()
    };
    Client::connect_with(server.addr.to_string(), config)
        .await
        .unwrap()
}

/// Sessions named `alpha` (holding `jobs/a`) and `beta` (waiting for
/// it); a check `disk`. Returns what keeps them.
async fn workload(client: &Client) -> Vec<Box<dyn std::any::Any + Send>> {
    let named = |name: &str| SessionOptions::new(name).lock_delay(Duration::ZERO);
    let alpha = client.create_session(named("alpha")).await.unwrap();
    let held = alpha
        .try_lock("jobs/a", LockOptions::exclusive())
        .await
        .unwrap();
    let beta = client.create_session(named("beta")).await.unwrap();
    let waiting = tokio::spawn(async move {
        let _ = beta.lock("jobs/a", LockOptions::exclusive()).await;
        beta
    });
    while client.lock_info("jobs/a").await.unwrap().waiters_total == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    client
        .set_check("disk", leasehold::CheckStatus::Passing, "93% free")
        .await
        .unwrap();
    vec![Box::new(alpha), Box::new(held), Box::new(waiting)]
}

// OPS-5: the page is one HTML file, its style and its script, served with
// a policy that lets it load nothing else.
#[tokio::test]
async fn the_page_is_served_with_a_policy_that_loads_nothing_else() {
    let (_server, http, _) = master().await;
    let page = get(http, "/", None).await;
    assert_eq!(page.status, 200);
    assert!(
        page.headers.contains("content-type: text/html"),
        "{}",
        page.headers
    );
    assert!(
        page.headers
            .contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{}",
        page.headers
    );
    assert!(page.body.contains("<script src=\"/status.js\""));
    for (path, kind) in [
        ("/status.js", "text/javascript"),
        ("/status.css", "text/css"),
    ] {
        let asset = get(http, path, None).await;
        assert_eq!(asset.status, 200, "{path}");
        assert!(asset.headers.contains(kind), "{path}: {}", asset.headers);
    }
}

// OPS-5: `/api/status` answers the master's figures and its sessions,
// locks (holder, time held, waiters) and checks.
#[tokio::test]
async fn api_status_shows_figures_sessions_locks_and_checks() {
    let (_server, http, operator) = master().await;
    let _kept = workload(&operator).await;
    let answer = get(http, "/api/status", None).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(answer.headers.contains("cache-control: no-store"));
    let status: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(status["master"]["sessions"], 2);
    assert_eq!(status["master"]["waiters"], 1);
    let locks = status["locks"].as_array().unwrap();
    let a = locks.iter().find(|l| l["key"] == "jobs/a").expect("jobs/a");
    assert_eq!(a["holders"][0]["name"], "alpha");
    assert!(a["holders"][0]["held_ms"].as_u64().is_some(), "{a}");
    assert_eq!(a["waiters"][0]["name"], "beta");
    let names: Vec<&str> = status["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert!(
        names.contains(&"alpha") && names.contains(&"beta"),
        "{names:?}"
    );
    assert_eq!(status["checks"][0]["name"], "disk");
    assert_eq!(status["checks"][0]["status"], "passing");
}

// OPS-5: with access control on, the page's data and `/metrics` need a
// bearer token; a wrong one is refused without being repeated, and a
// right one sees only the keys its principal may read. `/health` stays
// open.
#[tokio::test]
async fn with_access_control_on_the_data_and_metrics_need_a_token() {
    let (_server, http, operator) = master().await;
    operator
        .set_rule(Rule {
            prefix: "pub/".into(),
            principal: "reader".into(),
            rights: Rights::READ,
        })
        .await
        .unwrap();
    let token = operator.create_token("reader", "page").await.unwrap();
    let session = operator
        .create_session(SessionOptions::new("op"))
        .await
        .unwrap();
    let _guards = [
        session
            .try_lock("pub/a", LockOptions::exclusive())
            .await
            .unwrap(),
        session
            .try_lock("secret/b", LockOptions::exclusive())
            .await
            .unwrap(),
    ];
    operator.set_access_control(true).await.unwrap();

    for path in ["/api/status", "/metrics"] {
        let refused = get(http, path, None).await;
        assert_eq!(refused.status, 401, "{path}: {}", refused.body);
        assert!(
            refused.headers.contains("www-authenticate: bearer"),
            "{path}: {}",
            refused.headers
        );
    }
    let forged = "lht1_99_0000000000000000000000000000000000000000000000000000000000000000";
    let refused = get(http, "/api/status", Some(forged)).await;
    assert_eq!(refused.status, 401);
    assert!(!refused.body.contains(forged), "{}", refused.body);
    assert_eq!(get(http, "/health", None).await.status, 200);

    let reader = token.to_string();
    assert_eq!(get(http, "/metrics", Some(&reader)).await.status, 200);
    let answer = get(http, "/api/status", Some(&reader)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let status: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    let keys: Vec<&str> = status["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["key"].as_str())
        .collect();
    assert_eq!(keys, ["pub/a"]);
    assert_eq!(
        status["locks"][0]["holders"][0]["name"], "",
        "the operator's session is not the reader's to name"
    );
    assert_eq!(status["identity"]["principal"], "reader");
    assert!(status["sessions"].as_array().unwrap().is_empty());
}

// OPS-5: the data is answered only for requests that name an IP address,
// localhost, or a name serve was given: another site's script that made
// its own name resolve to this machine (DNS rebinding) is refused.
#[tokio::test]
async fn data_is_refused_to_a_request_for_a_name_the_port_was_not_given() {
    let config = Config {
        http_hosts: vec!["Leasehold.Internal".into()],
        ..Config::default()
    };
    let (_server, http) = start_with_http(config).await;
    for path in ["/api/status", "/metrics"] {
        let refused = get_for(http, "attacker.example:7180", path, None).await;
        assert_eq!(refused.status, 421, "{path}");
        assert!(!refused.body.contains("attacker"), "{}", refused.body);
        for host in ["localhost:7180", "[::1]:7180", "leasehold.internal:7180"] {
            assert_eq!(
                get_for(http, host, path, None).await.status,
                200,
                "{host}{path}"
            );
        }
    }
    assert_eq!(
        get_for(http, "attacker.example", "/", None).await.status,
        200,
        "the page alone holds nothing"
    );
}

/// The Chromium this machine has, if any.
fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|name| {
            std::process::Command::new(name)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// Runs headless Chromium on `url` with `args` besides its own, for at
/// most a minute; returns its stdout.
async fn run_chromium(browser: &str, profile: &TempDir, args: &[String], url: &str) -> String {
    let mut command = tokio::process::Command::new(browser);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            // Nothing but loopback: the page loads nothing from elsewhere,
            // and the browser asks nothing of the internet either.
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            // Time in the page runs ahead until its timers and fetches are
            // done, so the dump shows what the first answers made of it.
            "--virtual-time-budget=5000",
            "--window-size=1200,800",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("Chromium finished within a minute")
        .expect("Chromium ran");
    assert!(out.status.success(), "Chromium failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

// OPS-5: in a real browser the page shows the master, who holds each lock
// and who waits, the sessions and the checks. It saves a screenshot
// (README shows the one in tests/screenshots/, written when
// LEASEHOLD_UPDATE_SCREENSHOT=1). A name made of markup (keys cannot hold any) is shown as text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_the_page_shows_who_holds_what() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var_os("LEASEHOLD_REQUIRE_CHROMIUM").is_none(),
            "LEASEHOLD_REQUIRE_CHROMIUM is set and no Chromium was found"
        );
        eprintln!("no Chromium on this machine: the browser test did not run");
        return;
    };
    let (_server, http, operator) = master().await;
    let _kept = workload(&operator).await;
    let url = format!("http://{http}/");
    let profile = TempDir::new("chromium");
    let dom = run_chromium(browser, &profile, &["--dump-dom".into()], &url).await;
    assert!(dom.contains("<td>jobs/a</td><td>exclusive</td>"), "{dom}");
    assert!(dom.contains("<div>alpha</div>"), "the holder: {dom}");
    assert!(dom.contains("<td>beta</td>"), "the waiter: {dom}");
    assert!(
        dom.contains("<td>disk</td><td class=\"passing\">passing</td>"),
        "{dom}"
    );
    assert!(dom.contains("2 live"), "{dom}");
    assert!(dom.contains("1 held (1 holdings), 1 waiting"), "{dom}");
    assert!(!dom.contains("Cannot reach"), "{dom}");

    let shot = match std::env::var_os("LEASEHOLD_UPDATE_SCREENSHOT") {
        Some(_) => {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("screenshots/status-page.png")
        }
        None => profile.path().join("status-page.png"),
    };
    run_chromium(
        browser,
        &profile,
        &[format!("--screenshot={}", shot.display())],
        &url,
    )
    .await;
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000);

    let marked = operator
        .create_session(SessionOptions::new("<img src=x onerror=alert(1)>"))
        .await
        .unwrap();
    let _held = marked
        .try_lock("jobs/m", LockOptions::exclusive())
        .await
        .unwrap();
    let dom = run_chromium(browser, &profile, &["--dump-dom".into()], &url).await;
    assert!(dom.contains("&lt;img src=x onerror=alert(1)&gt;"), "{dom}");
    assert!(!dom.contains("<img"), "markup stays text: {dom}");
}

// OPS-2, OPS-5: a master speaking TLS serves its HTTP port as HTTPS with
// the same certificate: plaintext HTTP gets no answer, a probe needs no
// client certificate, a client certificate the client CA signed names the
// principal of the page's data and of `/metrics` under access control, and
// one another CA signed is refused in the handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tls_the_port_speaks_https_and_a_client_certificate_names_the_principal() {
    use leasehold::TlsOptions;
    use leasehold_server::{ServerTls, TlsFiles};
    use leasehold_tests::certs::Pki;
    use leasehold_tests::http::get_tls;
    use leasehold_tests::raw::RawTls;

    let dir = TempDir::new("status-https");
    let pki = Pki::new(dir.path(), "https");
    let tls = ServerTls::load(TlsFiles {
        cert: pki.server.cert.clone(),
        key: pki.server.key.clone(),
        client_ca: Some(pki.ca.clone()),
    })
    .unwrap();
    let config = Config {
        operator_token: Some(OPERATOR_TOKEN.into()),
        tls: Some(tls),
        ..Config::default()
    };
    let (server, http) = start_with_http(config).await;
    let ops = pki.client_named("ops");
    let operator = Client::connect_with(
        server.addr.to_string(),
        ClientConfig {
            tls: Some(TlsOptions::new(&pki.ca).client_certificate(&ops.cert, &ops.key)),
            token: Some(OPERATOR_TOKEN.into()),
            ..ClientConfig::default()
        },
    )
    .await
    .unwrap();
    operator
        .set_rule(Rule {
            prefix: String::new(),
            principal: "ops".into(),
            rights: Rights::READ,
        })
        .await
        .unwrap();
    operator.set_access_control(true).await.unwrap();

    // Plaintext is told to use HTTPS, and served nothing.
    let plain = get(http, "/health", None).await;
    assert_eq!(plain.status, 400, "{plain:?}");
    assert!(plain.body.contains("speaks HTTPS"), "{plain:?}");
    let anonymous = RawTls::load(&pki.ca, None, "127.0.0.1").unwrap();
    let probe = get_tls(http, &anonymous, "/health", None).await.unwrap();
    assert_eq!(probe.status, 200, "{}", probe.body);
    for path in ["/metrics", "/api/status"] {
        let refused = get_tls(http, &anonymous, path, None).await.unwrap();
        assert_eq!(refused.status, 401, "{path}: {}", refused.body);
    }

    let certified = RawTls::load(&pki.ca, Some((&ops.cert, &ops.key)), "127.0.0.1").unwrap();
    let metrics = get_tls(http, &certified, "/metrics", None).await.unwrap();
    assert_eq!(metrics.status, 200, "{}", metrics.body);
    assert!(
        metrics.body.contains("leasehold_epoch 1\n"),
        "{}",
        metrics.body
    );
    let answer = get_tls(http, &certified, "/api/status", None)
        .await
        .unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    let status: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(status["identity"]["principal"], "ops");
    assert_eq!(status["identity"]["via"], "certificate");

    let other = Pki::new(dir.path().join("other"), "forged");
    let forged = RawTls::load(
        &pki.ca,
        Some((&other.client.cert, &other.client.key)),
        "127.0.0.1",
    )
    .unwrap();
    let refused = get_tls(http, &forged, "/metrics", None).await;
    assert!(
        refused.as_ref().map_or(true, |a| a.status == 0),
        "a certificate another CA signed was served: {refused:?}"
    );
}
