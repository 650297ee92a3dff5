//! `serve --tls-cert` and the clients' `--tls-ca` as an operator runs them
//! (SPEC `TLS-1`..`TLS-4`).

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::{spawn_serve, BIN};
use leasehold_tests::certs::Pki;
use leasehold_tests::fixture::TempDir;

/// A directory of its own for each test, removed with everything in it
/// when the test ends.
fn dir(test: &str) -> TempDir {
    TempDir::new(&format!("cli-tls-{test}"))
}

fn leasehold(addr: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--addr")
        .arg(addr)
        .args(args)
        .env_remove("LEASEHOLD_TLS_CA")
        .env_remove("LEASEHOLD_TLS_CERT")
        .env_remove("LEASEHOLD_TLS_KEY")
        .output()
        .expect("run leasehold")
}

/// `serve --in-memory` with the certificate `pki` made for it.
fn tls_master(pki: &Pki) -> (std::process::Child, String) {
    let (cert, key) = (
        pki.server.cert.to_str().unwrap(),
        pki.server.key.to_str().unwrap(),
    );
    spawn_serve(&[
        "--in-memory",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        cert,
        "--tls-key",
        key,
    ])
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

// TLS-1, TLS-2, TLS-3: the CLI speaks TLS with --tls-ca; without it, it is
// told the port speaks TLS.
#[test]
fn the_cli_speaks_tls_with_the_masters_ca_and_is_told_when_it_does_not() {
    let d = dir("cli");
    let pki = Pki::new(&d, "cell");
    let (mut child, addr) = tls_master(&pki);
    let ca = pki.ca.to_str().unwrap();
    let put = leasehold(&addr, &["--tls-ca", ca, "put", "tls/k", "v"]);
    assert!(put.status.success(), "{put:?}");
    let get = leasehold(&addr, &["--tls-ca", ca, "get", "tls/k"]);
    assert_eq!(String::from_utf8_lossy(&get.stdout), "v\n");
    let plain = leasehold(&addr, &["get", "tls/k"]);
    assert_eq!(plain.status.code(), Some(1), "{plain:?}");
    assert!(
        stderr(&plain).contains("this port speaks TLS"),
        "{}",
        stderr(&plain)
    );
    assert_eq!(
        stderr(&plain).lines().count(),
        1,
        "one line: {}",
        stderr(&plain)
    );
    let _ = child.kill();
    let _ = child.wait();
}

// TLS-2: the client's own TLS settings failing is EX_CONFIG, apart from
// a master that cannot be reached (69) or that refused (1, 77).
#[test]
fn a_ca_file_that_cannot_be_read_or_a_certificate_it_does_not_trust_is_exit_status_78() {
    let d = dir("config");
    let pki = Pki::new(&d, "cell");
    let stranger = Pki::new(&d, "stranger");
    let (mut child, addr) = tls_master(&pki);
    let missing = leasehold(&addr, &["--tls-ca", "/nonexistent/ca.pem", "get", "k"]);
    assert_eq!(missing.status.code(), Some(78), "{missing:?}");
    assert!(
        stderr(&missing).contains("/nonexistent/ca.pem"),
        "{missing:?}"
    );
    let other_ca = stranger.ca.to_str().unwrap();
    let untrusted = leasehold(&addr, &["--tls-ca", other_ca, "get", "k"]);
    assert_eq!(untrusted.status.code(), Some(78), "{untrusted:?}");
    let _ = child.kill();
    let _ = child.wait();
}

// TLS-4: on SIGHUP the master reads its files again; new connections get
// the new certificate.
#[cfg(unix)]
#[test]
fn sighup_makes_the_master_read_its_certificate_again() {
    let d = dir("sighup");
    let (first, second) = (Pki::new(&d, "first"), Pki::new(&d, "second"));
    let (cert, key) = (d.join("live.pem"), d.join("live.key"));
    std::fs::copy(&first.server.cert, &cert).unwrap();
    std::fs::copy(&first.server.key, &key).unwrap();
    let (mut child, addr) = spawn_serve(&[
        "--in-memory",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let with =
        |ca: &std::path::Path| leasehold(&addr, &["--tls-ca", ca.to_str().unwrap(), "get", "k"]);
    assert_eq!(with(&first.ca).status.code(), Some(1), "absent, but served");
    std::fs::copy(&second.server.cert, &cert).unwrap();
    std::fs::copy(&second.server.key, &key).unwrap();
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    // The reload happens on the master's own time: wait for it, boundedly.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while with(&second.ca).status.code() != Some(1)
        || !stderr(&with(&second.ca)).contains("no node")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            with(&second.ca)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let old = with(&first.ca);
    assert!(
        stderr(&old).contains("not signed by the CA given"),
        "{}",
        stderr(&old)
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "SIGHUP does not stop a TLS master"
    );
    let _ = child.kill();
    let _ = child.wait();
}

// CELL-11: a member speaking TLS must verify its peers: without a client
// CA it is refused at start, saying what to give.
#[test]
fn a_cell_member_with_tls_but_no_client_ca_is_refused_at_start() {
    let d = dir("cell");
    let pki = Pki::new(&d, "cell");
    let out = Command::new(BIN)
        .args([
            "serve",
            "--cell",
            "1=127.0.0.1:7301",
            "--node",
            "1",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--data-dir", d.join("m1").to_str().unwrap()])
        .args(["--tls-cert", pki.server.cert.to_str().unwrap()])
        .args(["--tls-key", pki.server.key.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("give --tls-client-ca"),
        "{}",
        stderr(&out)
    );
}

// TLS-1: a certificate file that is missing is named in a one-line error.
#[test]
fn a_missing_certificate_file_is_named_at_start() {
    let d = dir("missing");
    let out = Command::new(BIN)
        .args(["serve", "--in-memory", "--listen", "127.0.0.1:0"])
        .args(["--tls-cert", d.join("nope.pem").to_str().unwrap()])
        .args(["--tls-key", d.join("nope.key").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("nope.pem"), "{}", stderr(&out));
}

// TLS-1: a key that is not the certificate's is named with it.
#[test]
fn a_key_that_is_not_the_certificates_is_named_at_start() {
    let d = dir("mismatch");
    let (one, other) = (Pki::new(&d, "one"), Pki::new(&d, "other"));
    let out = Command::new(BIN)
        .args(["serve", "--in-memory", "--listen", "127.0.0.1:0"])
        .args(["--tls-cert", one.server.cert.to_str().unwrap()])
        .args(["--tls-key", other.server.key.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(
        said.contains("is not the key of the certificate file"),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "one line: {said}");
}

// TLS-1: `cell status` against a TLS master says it did not answer as a
// member, not a decoder's complaint.
#[test]
fn cell_status_against_a_tls_master_says_it_is_no_member() {
    let d = dir("status");
    let pki = Pki::new(&d, "cell");
    let (mut child, addr) = tls_master(&pki);
    let out = leasehold(&addr, &["cell", "status"]);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("did not answer as a cell's member"),
        "{printed}"
    );
    let _ = child.kill();
    let _ = child.wait();
}

// CELL-11, ACL-7: three members speaking mutual TLS, each with the
// certificate that names it: clients and `cell status` reach them with the
// TLS flags, and `cell status` without them says no member answered as
// one. Rules and a token made on the master hold once it is killed and
// another member serves.
#[test]
fn a_cell_speaking_mutual_tls_serves_clients_and_status_over_tls() {
    let d = dir("tls-cell");
    let pki = Pki::new(&d, "cell");
    let ca = pki.ca.to_str().unwrap();
    let members = common::cell::start_three(&d, |id, addr, cell, _| {
        let member = &pki.members[id as usize - 1];
        let data = d.join(format!("m{id}"));
        let _ = std::fs::remove_dir_all(&data);
        let args = [
            "--cell",
            cell,
            "--node",
            &id.to_string(),
            "--listen",
            addr,
            "--data-dir",
            data.to_str().unwrap(),
            "--tls-cert",
            member.cert.to_str().unwrap(),
            "--tls-key",
            member.key.to_str().unwrap(),
            "--tls-client-ca",
            ca,
        ];
        (args.iter().map(|a| a.to_string()).collect(), Vec::new())
    });
    let addrs: Vec<String> = members.values().map(|(_, addr)| addr.clone()).collect();
    let mut children: Vec<std::process::Child> =
        members.into_values().map(|(child, _)| child).collect();
    let every = addrs.join(",");
    let (cert, key) = (
        pki.client.cert.to_str().unwrap(),
        pki.client.key.to_str().unwrap(),
    );
    let tls = ["--tls-ca", ca, "--tls-cert", cert, "--tls-key", key];
    let with_tls = |args: &[&str]| {
        let mut all = tls.to_vec();
        all.extend_from_slice(args);
        leasehold(&every, &all)
    };
    let mut put = with_tls(&["put", "svc/db", "10.0.0.5"]);
    for _ in 0..100 {
        if put.status.success() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        put = with_tls(&["put", "svc/db", "10.0.0.5"]);
    }
    assert!(put.status.success(), "{}", stderr(&put));
    let got = with_tls(&["get", "svc/db"]);
    assert_eq!(String::from_utf8_lossy(&got.stdout).trim(), "10.0.0.5");
    let who = with_tls(&["whoami"]);
    assert!(
        String::from_utf8_lossy(&who.stdout).starts_with("cell-client (client certificate)"),
        "{}",
        String::from_utf8_lossy(&who.stdout)
    );
    let status = with_tls(&["cell", "status"]);
    assert!(status.status.success(), "{}", stderr(&status));
    let printed = String::from_utf8_lossy(&status.stdout);
    assert!(
        printed.contains("yes"),
        "no member serves as master: {printed}"
    );
    let plain = leasehold(&every, &["cell", "status"]);
    assert!(!plain.status.success());

    for rule in [["", "cell-client", "all"], ["jobs/", "ci", "read"]] {
        let set = with_tls(&["acl", "set", rule[0], rule[1], rule[2]]);
        assert!(set.status.success(), "{}", stderr(&set));
    }
    let token = with_tls(&["token", "create", "ci"]);
    assert!(token.status.success(), "{}", stderr(&token));
    let token_file = d.join("ci.token");
    std::fs::write(&token_file, &token.stdout).unwrap();
    assert!(with_tls(&["acl", "enable"]).status.success());
    assert!(with_tls(&["put", "jobs/a", "1"]).status.success());
    // SIGKILL the member serving as master.
    let master = String::from_utf8_lossy(&with_tls(&["cell", "status"]).stdout)
        .lines()
        .find(|l| l.contains(" yes "))
        .and_then(|l| l.split_whitespace().next().map(String::from))
        .expect("a master");
    let master: usize = master.parse().unwrap();
    let mut killed = children.remove(master - 1);
    killed.kill().unwrap();
    killed.wait().unwrap();
    let as_ci = |args: &[&str]| {
        let mut all = vec!["--token-file", token_file.to_str().unwrap()];
        all.extend_from_slice(args);
        with_tls(&all)
    };
    let mut read = as_ci(&["get", "jobs/a"]);
    for _ in 0..100 {
        if read.status.success() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        read = as_ci(&["get", "jobs/a"]);
    }
    assert!(read.status.success(), "{}", stderr(&read));
    let refused = as_ci(&["get", "svc/db"]);
    assert_eq!(refused.status.code(), Some(77), "{}", stderr(&refused));
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}
