//! `leasehold acl`, `token` and `whoami`, as an operator and a newcomer use
//! them (SPEC "Access control").

mod common;

use common::{spawn_serve, stdout, Serve};

/// A master with an operator token; the path of a file holding it.
fn guarded(name: &str) -> (Serve, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("leasehold-acl-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("operator");
    std::fs::write(&token_file, "an-operator-token-long-enough\n").unwrap();
    let (child, addr) = spawn_serve(&[
        "--listen",
        "127.0.0.1:0",
        "--in-memory",
        "--operator-token-file",
        token_file.to_str().unwrap(),
    ]);
    (Serve { child, addr }, token_file)
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).to_string()
}

// ACL-1, ACL-5, TOK-1, ID-2, ID-3: README's walkthrough, less TLS.
#[test]
fn a_token_with_only_lock_on_jobs_locks_there_and_is_refused_elsewhere() {
    let (serve, operator) = guarded("walk");
    let operator = operator.to_str().unwrap();
    let as_operator = |args: &[&str]| {
        let mut all = vec!["--operator-token-file", operator];
        all.extend_from_slice(args);
        serve.run(&all)
    };
    assert!(serve.run(&["put", "svc/db", "10.0.0.5"]).status.success());
    for rule in [["jobs/", "ci", "lock"], ["", "ops", "all"]] {
        let set = as_operator(&["acl", "set", rule[0], rule[1], rule[2]]);
        assert!(set.status.success(), "{set:?}");
    }
    let created = as_operator(&["token", "create", "ci", "--note", "the nightly job"]);
    assert!(created.status.success(), "{created:?}");
    let token = stdout(&created);
    assert!(token.starts_with("lht1_"), "{token}");
    assert!(stderr(&created).contains("not shown again"));
    let token_file = std::path::Path::new(operator).with_file_name("ci.token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let ci = token_file.to_str().unwrap();

    let who = serve.run(&["--token-file", ci, "whoami"]);
    assert_eq!(stdout(&who), "ci (token 1); access control is off");
    assert!(as_operator(&["acl", "enable"]).status.success());
    let listed = stdout(&as_operator(&["acl", "list"]));
    assert_eq!(
        listed, "# access control is on\n\"\" ops all\njobs/ ci lock",
        "{listed}"
    );

    let refused = serve.run(&["--token-file", ci, "get", "svc/db"]);
    assert_eq!(refused.status.code(), Some(77), "{refused:?}");
    let said = stderr(&refused);
    assert!(said.contains("lacks read on \"svc/db\""), "{said}");
    assert!(!said.contains("10.0.0.5"), "{said}");
    let locked = serve.run(&["--token-file", ci, "lock", "jobs/nightly", "--", "true"]);
    assert!(locked.status.success(), "{locked:?}");

    // Anonymous clients are refused too, now that it is on.
    assert_eq!(serve.run(&["get", "svc/db"]).status.code(), Some(77));
    let tokens = stdout(&as_operator(&["token", "list"]));
    assert!(tokens.starts_with("1  ci  created at index"), "{tokens}");
    assert!(tokens.ends_with("the nightly job"), "{tokens}");
    assert!(!tokens.contains(&token[8..]), "{tokens}");

    assert!(as_operator(&["token", "revoke", "1"]).status.success());
    let revoked = serve.run(&["--token-file", ci, "whoami"]);
    assert_eq!(revoked.status.code(), Some(77), "{revoked:?}");
    assert!(stderr(&revoked).contains("unknown, revoked or mistyped"));
    let again = as_operator(&["token", "revoke", "1"]);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
}

// ACL-5: without the operator token, nobody changes the rules of a master
// that has one.
#[test]
fn without_the_operator_token_the_rules_cannot_be_changed() {
    let (serve, _) = guarded("anon");
    let refused = serve.run(&["acl", "set", "", "me", "all"]);
    assert_eq!(refused.status.code(), Some(77), "{refused:?}");
    assert!(stderr(&refused).contains("operator"), "{refused:?}");
}

#[test]
fn a_mistyped_right_is_a_usage_error_naming_the_rights() {
    let serve = Serve::start();
    let typo = serve.run(&["acl", "set", "jobs/", "ci", "lok"]);
    assert_eq!(typo.status.code(), Some(64), "{typo:?}");
    let said = stderr(&typo);
    assert!(said.contains("\"lok\" is not a right"), "{said}");
    assert!(said.contains("read, write, lock, admin"), "{said}");
}

// EX_CONFIG: the client's own file, not the master's answer.
#[test]
fn a_missing_token_file_is_named_and_exit_status_78() {
    let serve = Serve::start();
    let missing = serve.run(&["--token-file", "/nonexistent/ci.token", "whoami"]);
    assert_eq!(missing.status.code(), Some(78), "{missing:?}");
    assert!(
        stderr(&missing).contains("cannot read the token file /nonexistent/ci.token"),
        "{missing:?}"
    );
}

#[test]
fn an_empty_operator_token_file_is_exit_status_78() {
    let serve = Serve::start();
    let dir =
        std::env::temp_dir().join(format!("leasehold-cli-empty-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("operator.token");
    std::fs::write(&empty, "\n").unwrap();
    let out = serve.run(&[
        "--operator-token-file",
        empty.to_str().unwrap(),
        "acl",
        "list",
    ]);
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    assert!(stderr(&out).contains("is empty"), "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn removing_a_rule_that_is_not_there_exits_1() {
    let serve = Serve::start();
    let gone = serve.run(&["acl", "rm", "jobs/", "nobody"]);
    assert_eq!(gone.status.code(), Some(1), "{gone:?}");
    assert!(stderr(&gone).contains("acl list"), "{gone:?}");
}

#[test]
fn whoami_with_json_says_anonymous() {
    let serve = Serve::start();
    let who = serve.run(&["--json", "whoami"]);
    assert_eq!(
        stdout(&who),
        r#"{"access_control":false,"principal":null,"via":"anonymous"}"#
    );
}

// AUDIT-1: an audit log that cannot be opened stops serve at start.
#[test]
fn an_audit_log_that_cannot_be_opened_is_named_at_start() {
    let output = std::process::Command::new(common::BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--in-memory"])
        .args(["--audit-log", "/nonexistent/dir/audit.jsonl"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let said = stderr(&output);
    assert!(
        said.contains("cannot open the audit log /nonexistent/dir/audit.jsonl"),
        "{said}"
    );
}
