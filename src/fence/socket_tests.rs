//! The fence in the sockets, against a real TCP peer: a request the client's
//! connection is still writing when the Lease time runs out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

use kura_core::shard::Shards;

use super::{Fence, fenced_service};

/// Far more than the kernel's socket buffers hold between the two ends
/// (a few MiB on loopback), so that the connection is still writing the
/// body, blocked on a full socket, when the time runs out.
const BODY: usize = 64 << 20;

/// How long the Lease time lasts from the start of the scenario.
const RENEW_DEADLINE: Duration = Duration::from_millis(500);

/// What the peer received of a POST of [`BODY`] bytes sent through
/// [`fenced_service`] with `fence`, reading nothing until `until` and then
/// everything that comes, and what the client was answered.
async fn received_after(fence: Arc<Fence>, until: Instant) -> (usize, Result<(), String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let peer = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        // Not reading: the client fills the socket's buffers and waits.
        tokio::time::sleep_until(until.into()).await;
        let mut received = 0;
        let mut buf = vec![0u8; 1 << 16];
        // Everything that comes, until the client closes the connection or
        // the whole request is in.
        while received < BODY {
            match tokio::time::timeout(Duration::from_secs(60), socket.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => received += n,
                Err(_) => panic!("the client neither wrote nor closed for 60 s"),
            }
        }
        let _ = socket
            .write_all(b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n")
            .await;
        received
    });
    let config = kube::Config::new(url.parse().unwrap());
    let service = fenced_service(&config, fence).unwrap();
    let request = http::Request::builder()
        .method(http::Method::POST)
        .uri("/api/v1/namespaces/tenant/configmaps")
        .body(kube::client::Body::from(vec![b'x'; BODY]))
        .unwrap();
    let answer = service.oneshot(request).await;
    let received = peer.await.unwrap();
    (received, answer.map(|_| ()).map_err(|e| e.to_string()))
}

/// The client's connection task holds the request's bytes (here: blocked on
/// a full socket; in life: a stall of the process) when the Lease time runs
/// out. Nothing of it is written after that time: the connection fails.
#[tokio::test]
async fn a_request_the_connection_holds_when_the_lease_time_runs_out_is_not_written_after_it() {
    let fence = Arc::new(Fence::elected(Shards::ONE, "kura-system"));
    let start = Instant::now();
    fence.renewed(0, Some(start), RENEW_DEADLINE);
    let until = fence
        .live_until(super::Scope::Shard(0), start)
        .unwrap()
        .unwrap();
    let (received, answer) = received_after(fence, until).await;
    assert!(answer.is_err(), "the request failed: {answer:?}");
    assert!(
        received < BODY / 4,
        "only what the sockets held when the time ran out arrives: {received} of {BODY} bytes"
    );
}

/// The negative control: the same request on the same stack without a
/// Lease time (a fence open, as without election) is written whole after
/// that moment, by the connection task alone.
#[tokio::test]
async fn without_a_lease_time_the_connection_writes_the_whole_request_after_that_moment() {
    let until = Instant::now() + RENEW_DEADLINE;
    let (received, answer) = received_after(Arc::new(Fence::open()), until).await;
    assert!(received >= BODY, "{received} of {BODY} bytes");
    assert!(answer.is_ok(), "{answer:?}");
}

/// Reads are not fenced in the sockets either: a GET after the time passes.
#[tokio::test]
async fn reads_pass_after_the_lease_time() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let peer = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = socket.read(&mut buf).await.unwrap();
        socket
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        String::from_utf8_lossy(&buf[..n]).to_string()
    });
    let fence = Arc::new(Fence::elected(Shards::ONE, "kura-system"));
    // Renewed long ago: the time is over.
    fence.renewed(0, Some(Instant::now() - RENEW_DEADLINE), RENEW_DEADLINE);
    let config = kube::Config::new(url.parse().unwrap());
    let service = fenced_service(&config, fence).unwrap();
    let request = http::Request::builder()
        .method(http::Method::GET)
        .uri("/api/v1/namespaces/tenant/configmaps")
        .body(kube::client::Body::empty())
        .unwrap();
    let answer = service.oneshot(request).await.unwrap();
    assert_eq!(answer.status(), http::StatusCode::OK);
    assert!(
        peer.await
            .unwrap()
            .starts_with("GET /api/v1/namespaces/tenant/configmaps")
    );
}
