//! Access control under faults (SPEC "Access control"): an operator that
//! turns access control on and then changes, at random times, what one
//! principal, the snooper, may read; and the snooper, which subscribes to
//! every key the writers write and reads them, reporting each event it
//! hears and each read answered. The `access` check holds both to the
//! rules in force at the index each change was made.
//!
//! Every other client stays anonymous, under a rule that gives anyone
//! every right: the other checks see the run they always saw.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::{
    Client, ClientConfig, ClientError, Rights, Rule, SessionOptions, SubscribeOptions,
    SubscriptionEvent,
};
use tokio::time::{sleep, timeout};

use super::app::{client_config, Ctx};
use super::net::{SimCellConnector, SimConnector};
use super::rng::Rng;
use super::trace::{now_ms, What};

/// The operator's host.
pub const OPERATOR: &str = "acl";
/// The snooper's host.
pub const SNOOPER: &str = "snoop";
/// The snooper's principal.
pub const PRINCIPAL: &str = "snooper";
/// What the snooper subscribes to: every key the writers write.
pub const WATCHED: &str = "kv";

/// The prefixes whose rule for the snooper the operator changes.
pub fn prefixes() -> Vec<String> {
    ["kv/own/w1/", "kv/own/w2/", "kv/shared/"]
        .map(String::from)
        .to_vec()
}

/// The keys the snooper reads.
fn readable() -> Vec<String> {
    ["kv/own/w1/a", "kv/own/w2/b", "kv/shared/0", "kv/shared/1"]
        .map(String::from)
        .to_vec()
}

/// A change the operator makes at a virtual time: the snooper may read
/// under `prefix`, or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleChange {
    pub at: u64,
    pub prefix: String,
    pub read: bool,
}

/// Changes every 500 ms to 3 s through the work, each on a random prefix.
pub fn plan(rng: &mut Rng, work: u64) -> Vec<RuleChange> {
    let mut changes = Vec::new();
    let mut at = rng.range(2_000, 4_000);
    let prefixes = prefixes();
    while at + 2_000 < work {
        changes.push(RuleChange {
            at,
            prefix: rng.pick(&prefixes).clone(),
            read: rng.chance(0.5),
        });
        at += rng.range(500, 3_000);
    }
    changes
}

/// Where the operator leaves the snooper's token.
pub type TokenSlot = Arc<Mutex<Option<String>>>;

async fn connect(ctx: &Ctx, token: Option<String>) -> Option<Client> {
    let config = ClientConfig {
        token,
        ..client_config(ctx)
    };
    if let [master] = &ctx.servers[..] {
        let connector = SimConnector {
            host: master.clone(),
        };
        return Client::with_connector(connector, config).await.ok();
    }
    let start = ctx.name.bytes().map(usize::from).sum::<usize>();
    let connector = SimCellConnector::new(ctx.servers.clone(), start);
    Client::with_connector(connector, config).await.ok()
}

/// Tries `step` until it is done or the work is over.
async fn until_done<T, F, Fut>(mut step: F, work_until: u64) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClientError>>,
{
    while now_ms() < work_until {
        if let Ok(Ok(done)) = timeout(Duration::from_secs(3), step()).await {
            return Some(done);
        }
        sleep(Duration::from_millis(200)).await;
    }
    None
}

/// The operator: gives anyone every right, makes the snooper's token,
/// turns access control on, then carries out `changes` in order.
pub async fn operate(ctx: Ctx, changes: Vec<RuleChange>, slot: TokenSlot) -> turmoil::Result {
    let client = loop {
        if let Some(client) = connect(&ctx, None).await {
            break client;
        }
        if now_ms() >= ctx.work_until {
            return Ok(());
        }
        sleep(Duration::from_millis(300)).await;
    };
    let anyone = Rule {
        prefix: String::new(),
        principal: "*".into(),
        rights: Rights::ALL,
    };
    let work_until = ctx.work_until;
    if until_done(|| client.set_rule(anyone.clone()), work_until)
        .await
        .is_none()
    {
        return Ok(());
    }
    let Some(token) = until_done(|| client.create_token(PRINCIPAL, "sim"), work_until).await else {
        return Ok(());
    };
    if until_done(|| client.set_access_control(true), work_until)
        .await
        .is_none()
    {
        return Ok(());
    }
    *slot.lock().unwrap() = Some(token.to_string());
    for change in changes {
        sleep(Duration::from_millis(change.at.saturating_sub(now_ms()))).await;
        let rights = if change.read { "read" } else { "none" };
        let (prefix, rights) = (change.prefix.clone(), rights.to_string());
        ctx.trace.push(
            OPERATOR,
            What::RuleSending {
                prefix: prefix.clone(),
                rights: rights.clone(),
            },
        );
        let rule = Rule {
            prefix: prefix.clone(),
            principal: PRINCIPAL.into(),
            rights: if change.read {
                Rights::READ
            } else {
                Rights::NONE
            },
        };
        let (outcome, index) = match timeout(Duration::from_secs(4), client.set_rule(rule)).await {
            Ok(Ok(index)) => ("done", Some(index)),
            Ok(Err(e)) if e.outcome_unknown() => ("unknown", None),
            Ok(Err(ClientError::Server(_) | ClientError::Connect { .. })) => ("failed", None),
            _ => ("unknown", None),
        };
        ctx.trace.push(
            OPERATOR,
            What::RuleSet {
                prefix,
                rights,
                outcome: outcome.into(),
                index,
            },
        );
    }
    Ok(())
}

/// The snooper: with the operator's token, subscribes to [`WATCHED`] and
/// reads keys under it, reporting what it hears and learns.
pub async fn snoop(mut ctx: Ctx, slot: TokenSlot) -> turmoil::Result {
    let token = loop {
        if let Some(token) = slot.lock().unwrap().clone() {
            break token;
        }
        if now_ms() >= ctx.work_until {
            return Ok(());
        }
        sleep(Duration::from_millis(100)).await;
    };
    let keys = readable();
    while now_ms() < ctx.work_until {
        let Some(client) = connect(&ctx, Some(token.clone())).await else {
            sleep(Duration::from_millis(300)).await;
            continue;
        };
        let options = SessionOptions::new(SNOOPER)
            .lease(ctx.settings.lease)
            .grace(ctx.settings.grace)
            .lock_delay(Duration::ZERO);
        let Ok(Ok(session)) = timeout(Duration::from_secs(3), client.create_session(options)).await
        else {
            sleep(Duration::from_millis(300)).await;
            continue;
        };
        let subscribe = session.subscribe(WATCHED, SubscribeOptions::prefix());
        let Ok(Ok(mut events)) = timeout(Duration::from_secs(3), subscribe).await else {
            let _ = timeout(Duration::from_secs(2), session.close()).await;
            continue;
        };
        loop {
            if now_ms() >= ctx.work_until {
                break;
            }
            let pause = sleep(Duration::from_millis(ctx.rng.range(100, 400)));
            tokio::select! {
                event = events.next() => match event {
                    Some(SubscriptionEvent::Changed { key, index, .. }) => {
                        ctx.trace.push(SNOOPER, What::Heard { key, index });
                    }
                    Some(_) => {}
                    None => break,
                },
                () = pause => {
                    let key = ctx.rng.pick(&keys).clone();
                    let sent = now_ms();
                    if let Ok(Ok(_)) = timeout(Duration::from_secs(4), client.get(&key)).await {
                        ctx.trace.push(SNOOPER, What::Learned { key, sent });
                    }
                }
            }
        }
        drop(events);
        let _ = timeout(Duration::from_secs(2), session.close()).await;
    }
    Ok(())
}
