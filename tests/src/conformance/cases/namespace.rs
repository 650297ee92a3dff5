//! SPEC.md, "Namespace": keys and contents, the index and metadata every
//! write leaves, compare-and-set, listing, deleting, and watching.

use std::time::{Duration, Instant};

use leasehold_protocol::{Authority, ErrorCode, Request, Response};

use crate::conformance::common::{
    case, ensure, expect_error, expect_reply, key, open, put, written, SLACK,
};
use crate::conformance::{Case, Check, Ctx};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            &["NS-1", "NS-3"],
            bad_keys_and_oversized_contents_are_refused
        ),
        case!(
            &["NS-2", "NS-9"],
            each_write_takes_a_higher_index_and_get_shows_the_node
        ),
        case!(&["NS-5", "NS-7"], listing_and_recursive_delete),
        case!(
            &["NS-5", "NS-7"],
            a_listing_larger_than_a_frame_comes_in_pages
        ),
        case!(
            &["NS-6", "ERR-10"],
            a_put_with_cas_writes_only_at_the_index_it_names
        ),
        case!(&["NS-8"], a_watch_returns_when_its_key_changes),
    ]
}

async fn bad_keys_and_oversized_contents_are_refused(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    for bad in ["", "/lead", "trail/", "a//b", "a/../b", "sp ace"] {
        let reply = conn.call(put(bad, b"x", None, None)).await;
        expect_error!(reply, ErrorCode::InvalidArgument)
            .map_err(|e| format!("key {bad:?}: {e}"))?;
    }
    if w.limits.max_frame as usize > (256 << 10) + 1024 {
        let reply = conn
            .call(put(&key("big"), &vec![0; (256 << 10) + 1], None, None))
            .await;
        expect_error!(reply, ErrorCode::InvalidArgument)
            .map_err(|e| format!("256 KiB + 1: {e}"))?;
    }
    Ok(())
}

async fn each_write_takes_a_higher_index_and_get_shows_the_node(ctx: Ctx) -> Check {
    let (mut conn, _) = open(&ctx).await;
    let k = key("index");
    let first = written(&mut conn, put(&k, b"a", None, None), "first put").await?;
    let second = written(&mut conn, put(&k, b"b", None, None), "second put").await?;
    ensure!(second > first, "indexes must rise: {first} then {second}");
    let reply = conn
        .call(Request::Get {
            key: k.clone(),
            stat_only: false,
        })
        .await;
    let n = expect_reply!(reply, Response::Node { node: Some(n), .. } => n)
        .map_err(|e| format!("get: {e}"))?;
    ensure!(
        n.contents.as_deref() == Some(&b"b"[..]),
        "contents {:?}",
        n.contents
    );
    ensure!(
        n.stat.instance == first,
        "instance {} != {first}",
        n.stat.instance
    );
    ensure!(
        n.stat.content_generation == 2,
        "content generation {}",
        n.stat.content_generation
    );
    ensure!(
        n.stat.modify_index == second,
        "modify index {}",
        n.stat.modify_index
    );
    Ok(())
}

async fn listing_and_recursive_delete(ctx: Ctx) -> Check {
    let (mut conn, _) = open(&ctx).await;
    let root = key("tree");
    for child in ["b", "a", "a/deep"] {
        conn.call(put(&format!("{root}/{child}"), b"", None, None))
            .await
            .map_err(|e| format!("put: {e}"))?;
    }
    let listed = conn
        .call(Request::List {
            prefix: root.clone(),
            recursive: false,
            after: None,
            limit: 0,
        })
        .await;
    let keys = expect_reply!(listed, Response::Keys { keys, .. } => keys)
        .map_err(|e| format!("list: {e}"))?;
    ensure!(
        keys == [format!("{root}/a"), format!("{root}/b")],
        "children: {keys:?}"
    );
    let deleted = conn
        .call(Request::Delete {
            key: format!("{root}/a"),
            cas: None,
            recursive: true,
            authority: Authority::Anonymous,
        })
        .await;
    let keys = expect_reply!(deleted, Response::Deleted { keys, .. } => keys)
        .map_err(|e| format!("delete: {e}"))?;
    ensure!(keys.len() == 2, "deleted {keys:?}");
    Ok(())
}

async fn a_listing_larger_than_a_frame_comes_in_pages(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let root = key("wide");
    let segment = "k".repeat(400);
    let needed = w.limits.max_frame as usize / 400 + 10;
    ensure!(
        needed <= 20_000,
        "a maximum frame of {} is too large to test",
        w.limits.max_frame
    );
    for n in 0..needed {
        conn.call(put(&format!("{root}/{segment}{n}"), b"", None, None))
            .await
            .map_err(|e| format!("put {n}: {e}"))?;
    }
    let mut listed: Vec<String> = Vec::new();
    let mut pages = 0;
    loop {
        let reply = conn
            .call(Request::List {
                prefix: root.clone(),
                recursive: false,
                after: listed.last().cloned(),
                limit: 0,
            })
            .await;
        pages += 1;
        let (keys, more) = expect_reply!(reply, Response::Keys { keys, more, .. } => (keys, more))
            .map_err(|e| format!("page {pages}: {e}"))?;
        ensure!(!keys.is_empty(), "an empty page before the end");
        listed.extend(keys);
        if !more {
            break;
        }
    }
    ensure!(pages > 1, "{needed} keys over a frame came in one page");
    ensure!(
        listed.len() == needed && listed.windows(2).all(|w| w[0] < w[1]),
        "listed {} of {needed}, in order once each?",
        listed.len()
    );
    // A recursive delete of them all still answers within a frame (NS-7).
    let deleted = conn
        .call(Request::Delete {
            key: root,
            cas: None,
            recursive: true,
            authority: Authority::Anonymous,
        })
        .await;
    let deleted_total =
        expect_reply!(deleted, Response::Deleted { deleted_total, .. } => deleted_total)
            .map_err(|e| format!("recursive delete of {needed} keys: {e}"))?;
    ensure!(
        deleted_total as usize == needed,
        "deleted {deleted_total} of {needed}"
    );
    Ok(())
}

async fn a_put_with_cas_writes_only_at_the_index_it_names(ctx: Ctx) -> Check {
    let (mut conn, _) = open(&ctx).await;
    let k = key("cas");
    let first = written(&mut conn, put(&k, b"a", Some(0), None), "create-only put").await?;
    let again = conn.call(put(&k, b"b", Some(0), None)).await;
    expect_error!(again, ErrorCode::CasMismatch { current } if current == first)
        .map_err(|e| format!("second create-only put: {e}"))?;
    let second = written(
        &mut conn,
        put(&k, b"b", Some(first), None),
        "put with the right cas",
    )
    .await?;
    // The refused put left nothing behind: one write since the first.
    let node = conn
        .call(Request::Get {
            key: k.clone(),
            stat_only: false,
        })
        .await;
    let node = expect_reply!(node, Response::Node { node: Some(n), .. } => n)
        .map_err(|e| format!("get: {e}"))?;
    ensure!(
        node.contents.as_deref() == Some(&b"b"[..]),
        "contents {:?}",
        node.contents
    );
    ensure!(
        node.stat.content_generation == 2,
        "content generation {}",
        node.stat.content_generation
    );
    ensure!(
        node.stat.modify_index == second,
        "modify index {}",
        node.stat.modify_index
    );
    Ok(())
}

async fn a_watch_returns_when_its_key_changes(ctx: Ctx) -> Check {
    let (mut watcher, _) = open(&ctx).await;
    let (mut writer, _) = open(&ctx).await;
    let k = key("watch");
    let index = written(&mut writer, put(&k, b"1", None, None), "put").await?;
    watcher
        .request(Request::Watch {
            key: k.clone(),
            after_index: index,
            timeout_ms: 10_000,
        })
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    writer
        .call(put(&k, b"2", None, None))
        .await
        .map_err(|e| format!("put: {e}"))?;
    let (_, reply) = watcher.reply().await;
    ensure!(
        started.elapsed() < SLACK,
        "the watch answered after {:?}",
        started.elapsed()
    );
    expect_reply!(reply, Response::Node { index: i, .. } if i > index)
}
