//! `leasehold-conformance --addr HOST:PORT`: checks a running Leasehold
//! server against SPEC.md, rule by rule; exits non-zero on any failure.

use std::net::ToSocketAddrs;
use std::process::ExitCode;
use std::time::Duration;

use leasehold_tests::conformance::{self, Ctx};
use leasehold_tests::raw::RawTls;

fn usage() -> ExitCode {
    eprintln!(
        "usage: leasehold-conformance --addr HOST:PORT [--restart-cmd CMD] [--json] [--only RULE] [--coverage]\n\
         \x20      [--tls-ca FILE [--tls-cert FILE --tls-key FILE] [--tls-server-name NAME]]"
    );
    ExitCode::from(2)
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut addr = None;
    let mut json = false;
    let mut only = None;
    let mut check_coverage = false;
    let mut restart = None;
    let (mut tls_ca, mut tls_cert, mut tls_key, mut tls_name) = (None, None, None, None);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--addr" => addr = args.next(),
            "--json" => json = true,
            "--only" => only = args.next(),
            "--coverage" => check_coverage = true,
            "--restart-cmd" => restart = args.next(),
            "--tls-ca" => tls_ca = args.next().map(std::path::PathBuf::from),
            "--tls-cert" => tls_cert = args.next().map(std::path::PathBuf::from),
            "--tls-key" => tls_key = args.next().map(std::path::PathBuf::from),
            "--tls-server-name" => tls_name = args.next(),
            _ => return usage(),
        }
    }
    let Some(given) = addr else {
        return usage();
    };
    let Some(addr) = given.to_socket_addrs().ok().and_then(|mut a| a.next()) else {
        return usage();
    };
    // The certificate must name the host of --addr unless told otherwise.
    let host = given.rsplit_once(':').map_or(given.as_str(), |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let tls = match (&tls_ca, &tls_cert, &tls_key) {
        (None, None, None) => None,
        (Some(ca), cert, key) if cert.is_some() == key.is_some() => {
            let client = cert.as_deref().zip(key.as_deref());
            match RawTls::load(ca, client, tls_name.as_deref().unwrap_or(host)) {
                Ok(tls) => Some(tls),
                Err(e) => {
                    eprintln!("leasehold-conformance: TLS: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        _ => return usage(),
    };
    let mut cases = conformance::cases();
    if let Some(rule) = &only {
        cases.retain(|c| c.rules.contains(&rule.as_str()));
    }
    let ctx = Ctx {
        addr,
        restart: restart.map(conformance::restart_command),
        tls,
    };
    let outcomes = conformance::run(&ctx, &cases, Duration::from_secs(60)).await;
    let mut failed = 0;
    for o in &outcomes {
        let (verdict, detail) = match &o.result {
            Ok(()) => ("pass", String::new()),
            Err(e) if o.skipped() => ("skip", e.clone()),
            Err(e) => {
                failed += 1;
                ("FAIL", e.clone())
            }
        };
        if json {
            println!(
                "{{\"rules\":{:?},\"case\":{:?},\"result\":{:?},\"detail\":{:?},\"ms\":{}}}",
                o.rules,
                o.name,
                verdict,
                detail,
                o.took.as_millis()
            );
        } else {
            println!(
                "{:<28} {:<4} {:<72} {}",
                o.rules.join(","),
                verdict,
                o.name,
                detail
            );
        }
    }
    let uncovered = conformance::coverage(conformance::SPEC, &conformance::cases());
    if !json {
        println!(
            "{} cases, {} failed; {} SPEC rules without a case",
            outcomes.len(),
            failed,
            uncovered.len()
        );
        if !uncovered.is_empty() {
            println!("without a case: {}", uncovered.join(" "));
        }
    }
    if failed > 0 || (check_coverage && !uncovered.is_empty()) {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
