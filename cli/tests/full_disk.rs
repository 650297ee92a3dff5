//! A full disk under a `leasehold serve` process (a small tmpfs of its
//! own): the master refuses writes with a typed error, keeps serving reads
//! and KeepAlives, and takes writes again once there is room (`STORE-5`).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::spawn_serve;
use leasehold::{Client, ErrorCode, PutOptions, SessionOptions, SessionState};

/// A tmpfs mounted for this test, unmounted on drop.
struct SmallDisk(PathBuf);

impl SmallDisk {
    /// `None` where this machine does not let the test mount one.
    fn mount(bytes: u64) -> Option<SmallDisk> {
        let dir = std::env::temp_dir().join(format!("leasehold-full-disk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(&dir)
            .status()
            .ok()?;
        mounted.success().then_some(SmallDisk(dir))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Writes to `path` until the disk is full.
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while file.write_all(&chunk).is_ok() {}
    let _ = file.flush();
    // The last partial chunk may leave a little room: take it byte by byte.
    while file.write_all(&[0]).is_ok() && file.flush().is_ok() {}
}

// STORE-5, ERR-17
#[tokio::test]
async fn a_full_disk_refuses_writes_serves_reads_and_keepalives_and_recovers() {
    let Some(disk) = SmallDisk::mount(16 << 20) else {
        eprintln!("SKIPPED: this machine does not allow mounting a tmpfs for the test");
        return;
    };
    let data = disk.0.join("data");
    let (child, addr) = spawn_serve(&[
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().unwrap(),
        "--disk-reserve",
        "2097152",
    ]);
    let _master = common::Serve {
        child,
        addr: addr.clone(),
    };
    let client = Client::connect(addr).await.unwrap();
    let session = client
        .create_session(SessionOptions::new("kept").lease(Duration::from_secs(3)))
        .await
        .unwrap();
    client
        .put("kept", "before", PutOptions::new())
        .await
        .unwrap();

    let filler = disk.0.join("filler");
    fill(&filler);
    // Writes now fail for want of room, typed; at most a few are taken
    // from the reserve first.
    let contents = vec![b'x'; 64 * 1024];
    let mut refused = None;
    for n in 0..64 {
        match client
            .put(&format!("w/{n}"), contents.clone(), PutOptions::new())
            .await
        {
            Ok(_) => {}
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let refused = refused.expect("a write was refused");
    assert_eq!(refused.code(), Some(ErrorCode::StorageFull), "{refused}");

    // Reads and KeepAlives go on: the session stays Normal for more than
    // two leases.
    let node = client.get("kept").await.unwrap().unwrap();
    assert_eq!(node.contents.as_deref(), Some(&b"before"[..]));
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(session.state(), SessionState::Normal);

    // Room again: writes are accepted within moments.
    std::fs::remove_file(&filler).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match client.put("after", "room", PutOptions::new()).await {
            Ok(_) => break,
            Err(e) if e.code() == Some(ErrorCode::StorageFull) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "never writable again"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(session.state(), SessionState::Normal);
}
