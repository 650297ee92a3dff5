//! The real server and client over turmoil's simulated network, in virtual
//! time: the transport-generic design the partition simulations build on.

use std::time::Duration;

use leasehold::{Client, ClientConfig, ErrorCode, SessionOptions, SessionState};
use leasehold_server::{Config, IdSource};
use leasehold_tests::sim::{SimConnector, SimListener};
use leasehold_tests::states::StateLog;
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(2);
const GRACE: Duration = Duration::from_secs(5);

fn simulation() -> turmoil::Sim<'static> {
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(120))
        .rng_seed(1)
        .build();
    sim.host("master", || async {
        let listener = SimListener::bind().await?;
        let config = Config {
            ids: IdSource::Seeded(1),
            ..Config::default()
        };
        leasehold_server::Server::volatile(config)?
            .serve(listener, std::future::pending())
            .await?;
        Ok(())
    });
    sim
}

async fn connect() -> Result<Client, leasehold::ClientError> {
    let connector = SimConnector {
        host: "master".into(),
    };
    Client::with_connector(connector, ClientConfig::default()).await
}

// CS-2, CS-3
#[test]
fn a_partition_longer_than_lease_and_grace_gives_jeopardy_then_expired() {
    let mut sim = simulation();
    sim.client("client", async {
        let client = connect().await?;
        let session = client
            .create_session(SessionOptions::new("sim").lease(LEASE).grace(GRACE))
            .await?;
        let seen = StateLog::record(&session);

        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(seen.states().is_empty(), "normal while connected");

        let cut = Instant::now();
        turmoil::partition("client", "master");
        tokio::time::timeout(Duration::from_secs(30), session.expired()).await?;

        assert_eq!(
            seen.states(),
            [SessionState::Jeopardy, SessionState::Expired]
        );
        let seen = seen.timed();
        let (jeopardy_at, expired_at) = (seen[0].1, seen[1].1);
        assert!(jeopardy_at > cut && jeopardy_at <= cut + LEASE);
        // Virtual time: the grace period is exact to the timer's millisecond.
        let grace = expired_at - jeopardy_at;
        assert!(
            grace >= GRACE && grace <= GRACE + Duration::from_millis(2),
            "{grace:?}"
        );

        // The master expired the session too: once the link heals, it says so.
        turmoil::repair("client", "master");
        let again = connect().await?;
        let error = again.session_info(session.id()).await.unwrap_err();
        assert_eq!(error.code(), Some(ErrorCode::SessionExpired));
        Ok(())
    });
    sim.run().unwrap();
}

// CS-1
#[test]
fn a_partition_shorter_than_the_lease_leaves_the_session_normal() {
    let mut sim = simulation();
    sim.client("client", async {
        let client = connect().await?;
        let session = client
            .create_session(SessionOptions::new("sim").lease(Duration::from_secs(12)))
            .await?;
        let seen = StateLog::record(&session);

        // Partitioned right after a reply, for well under the margin left.
        tokio::time::sleep(Duration::from_secs(1)).await;
        turmoil::partition("client", "master");
        tokio::time::sleep(Duration::from_secs(3)).await;
        turmoil::repair("client", "master");
        tokio::time::sleep(Duration::from_secs(40)).await;

        assert_eq!(seen.states(), []);
        assert_eq!(session.state(), SessionState::Normal);
        Ok(())
    });
    sim.run().unwrap();
}
