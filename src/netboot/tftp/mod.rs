//! Read-only TFTP server on tokio UDP sockets.
//!
//! Each read request gets its own socket (its own TID, RFC 1350) and task; files
//! are streamed through a small buffer, at most one window of blocks is held to
//! answer retransmissions. Write requests are refused.

pub mod packet;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, BufReader};
use tokio::net::UdpSocket;

use super::files::{Refusal, Source, TftpFiles};
use super::slots::Slots;
use packet::{ErrorCode, Packet, Request};

/// Retransmissions of one packet or window before a transfer is abandoned.
const RETRIES: u32 = 5;
/// Until the client acknowledges its first packet (it may never have asked: a
/// spoofed or flooded request), a transfer is retried this often at most...
const FIRST_RETRIES: u32 = 2;
/// ... waiting at most this long each time, so it is abandoned within ~3 s.
const FIRST_TIMEOUT: Duration = Duration::from_secs(1);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);
/// File read-ahead per transfer.
const READ_BUFFER: usize = 64 * 1024;
/// Receive buffer of a transfer: clients send only ACKs and short ERRORs.
const ACK_BUFFER: usize = 1500;

/// Serves read requests arriving on `socket` until the task is dropped. `sessions`
/// caps the transfers running at once, in total and per client; requests over a cap
/// get an ERROR packet and no socket, task or buffer.
pub async fn serve(socket: UdpSocket, files: Arc<TftpFiles>, sessions: Slots) {
    let mut buf = vec![0u8; 65536];
    loop {
        let (len, peer) = match socket.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "TFTP receive failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        match packet::parse(&buf[..len]) {
            Ok(Packet::Read(req)) => {
                let slot = match sessions.take(peer.ip()) {
                    Ok(slot) => slot,
                    Err(over) => {
                        tracing::debug!(%peer, ?over, file = %req.filename, "TFTP read refused: too many transfers");
                        let _ = socket
                            .send_to(
                                &packet::error(
                                    ErrorCode::NotDefined,
                                    "server busy: too many TFTP transfers, try again shortly",
                                ),
                                peer,
                            )
                            .await;
                        continue;
                    }
                };
                let files = files.clone();
                let sessions = sessions.clone();
                let local = socket.local_addr().ok();
                tokio::spawn(async move {
                    if let Err(e) = transfer(peer, local, req, &files).await {
                        tracing::debug!(%peer, error = %e, "TFTP transfer ended early");
                    }
                    drop(slot);
                    if sessions.in_use() == 0 {
                        // A moment later, once this task's own memory is freed too,
                        // and only if no transfer started meanwhile.
                        tokio::spawn(async move {
                            tokio::time::sleep(TRIM_DELAY).await;
                            if sessions.in_use() == 0 {
                                release_freed_memory();
                            }
                        });
                    }
                });
            }
            Ok(Packet::Write(req)) => {
                tracing::debug!(%peer, file = %req.filename, "TFTP write refused");
                let _ = socket
                    .send_to(
                        &packet::error(
                            ErrorCode::AccessViolation,
                            "bmo's TFTP server is read-only",
                        ),
                        peer,
                    )
                    .await;
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(%peer, error = %e, "malformed TFTP packet dropped"),
        }
    }
}

/// How long after the last transfer ends its memory is handed back.
const TRIM_DELAY: std::time::Duration = std::time::Duration::from_millis(100);

/// Hands the memory freed by finished transfers back to the system, so that a flood's
/// windows do not stay resident once it is over. glibc keeps freed heap memory for
/// reuse unless asked; musl (the container build) returns it by itself.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it only walks the allocator's free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[derive(Debug, thiserror::Error)]
enum TransferError {
    #[error("network: {0}")]
    Io(#[from] std::io::Error),
    #[error("client stopped responding")]
    Timeout,
    #[error("client sent error {0}: {1}")]
    Client(u16, String),
    #[error("refused: {0}")]
    Refused(&'static str),
}

async fn transfer(
    peer: SocketAddr,
    local: Option<SocketAddr>,
    req: Request,
    files: &TftpFiles,
) -> Result<(), TransferError> {
    let bind: SocketAddr = match (local, peer) {
        (Some(l), _) if !l.ip().is_unspecified() => SocketAddr::new(l.ip(), 0),
        (_, SocketAddr::V4(_)) => "0.0.0.0:0".parse().map_err(std::io::Error::other)?,
        (_, SocketAddr::V6(_)) => "[::]:0".parse().map_err(std::io::Error::other)?,
    };
    let sock = UdpSocket::bind(bind).await?;
    sock.connect(peer).await?;
    if req.mode != "octet" && req.mode != "netascii" {
        sock.send(&packet::error(
            ErrorCode::IllegalOperation,
            "only octet mode is supported",
        ))
        .await?;
        return Err(TransferError::Refused("mode"));
    }
    let (reader, size): (Box<dyn AsyncRead + Unpin + Send>, u64) = match files
        .resolve(&req.filename)
    {
        Ok(Source::Embedded { data, .. }) => {
            let len = data.len() as u64;
            (Box::new(std::io::Cursor::new(data)), len)
        }
        Ok(Source::File(opened)) => {
            let len = opened.metadata.len();
            let file = tokio::fs::File::from_std(opened.file);
            (Box::new(BufReader::with_capacity(READ_BUFFER, file)), len)
        }
        Err(Refusal::NotFound) => {
            sock.send(&packet::error(ErrorCode::FileNotFound, "file not found"))
                .await?;
            return Err(TransferError::Refused("not found"));
        }
        Err(Refusal::Outside) => {
            tracing::debug!(%peer, file = %req.filename, "TFTP path outside the served directories refused");
            sock.send(&packet::error(
                ErrorCode::AccessViolation,
                "path outside the served directories",
            ))
            .await?;
            return Err(TransferError::Refused("outside"));
        }
    };
    let neg = packet::negotiate(&req, size, packet::MAX_BLKSIZE);
    let timeout = neg
        .timeout_secs
        .map_or(DEFAULT_TIMEOUT, |s| Duration::from_secs(u64::from(s)));
    let mut buf = vec![0u8; ACK_BUFFER];
    let mut heard_from_client = false;
    if !neg.acked.is_empty() {
        let oack = packet::oack(&neg.acked);
        let mut tries = 0;
        loop {
            sock.send(&oack).await?;
            match recv_ack(&sock, &mut buf, timeout.min(FIRST_TIMEOUT)).await? {
                Some(0) => break,
                Some(_) => {}
                None => {
                    tries += 1;
                    if tries > FIRST_RETRIES {
                        return Err(TransferError::Timeout);
                    }
                }
            }
        }
        heard_from_client = true;
    }
    tracing::debug!(%peer, file = %req.filename, size, blksize = neg.blksize, windowsize = neg.windowsize, "TFTP transfer");
    send_file(&sock, reader, &neg, timeout, heard_from_client, &mut buf).await
}

/// Waits for an ACK; `None` on timeout. Client errors end the transfer.
async fn recv_ack(
    sock: &UdpSocket,
    buf: &mut [u8],
    timeout: Duration,
) -> Result<Option<u16>, TransferError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let n = match tokio::time::timeout_at(deadline, sock.recv(buf)).await {
            Err(_) => return Ok(None),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Err(TransferError::Client(0, "port unreachable".into()));
            }
            Ok(r) => r?,
        };
        match packet::parse(&buf[..n]) {
            Ok(Packet::Ack { block }) => return Ok(Some(block)),
            Ok(Packet::Error { code, message }) => {
                return Err(TransferError::Client(code, message));
            }
            _ => {}
        }
    }
}

/// Reads up to `blksize` bytes (less only at end of file).
async fn read_block(
    reader: &mut (dyn AsyncRead + Unpin + Send),
    out: &mut [u8],
) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < out.len() {
        let n = reader.read(&mut out[filled..]).await?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}

async fn send_file(
    sock: &UdpSocket,
    mut reader: Box<dyn AsyncRead + Unpin + Send>,
    neg: &packet::Negotiated,
    timeout: Duration,
    mut heard_from_client: bool,
    buf: &mut [u8],
) -> Result<(), TransferError> {
    // Window of encoded DATA packets; `first` is the block index of window[0].
    let mut window: VecDeque<Vec<u8>> = VecDeque::with_capacity(usize::from(neg.windowsize));
    let mut spare: Vec<Vec<u8>> = Vec::new();
    let mut first: u64 = 1;
    let mut next: u64 = 1;
    let mut last_block: Option<u64> = None;
    let mut payload = vec![0u8; neg.blksize];
    let mut tries = 0;
    let mut need_send = true;
    loop {
        // Refill the window.
        while window.len() < usize::from(neg.windowsize) && last_block.is_none() {
            let n = read_block(reader.as_mut(), &mut payload).await?;
            let mut pkt = spare.pop().unwrap_or_default();
            // Block numbers roll over from 65535 to 0, as common clients expect.
            packet::data(next as u16, &payload[..n], &mut pkt);
            window.push_back(pkt);
            if n < neg.blksize {
                last_block = Some(next);
            }
            next += 1;
        }
        if need_send {
            for pkt in &window {
                sock.send(pkt).await?;
            }
        }
        need_send = true;
        let (wait, retries) = if heard_from_client {
            (timeout, RETRIES)
        } else {
            (timeout.min(FIRST_TIMEOUT), FIRST_RETRIES)
        };
        match recv_ack(sock, buf, wait).await? {
            None => {
                tries += 1;
                if tries > retries {
                    return Err(TransferError::Timeout);
                }
            }
            Some(ack) => {
                heard_from_client = true;
                let acked = (0..window.len() as u64)
                    .map(|i| first + i)
                    .find(|idx| *idx as u16 == ack);
                match acked {
                    Some(idx) => {
                        tries = 0;
                        for _ in first..=idx {
                            if let Some(p) = window.pop_front() {
                                spare.push(p);
                            }
                        }
                        first = idx + 1;
                        if last_block == Some(idx) {
                            return Ok(());
                        }
                    }
                    // An ACK from before the window. With windowsize 1 it is a
                    // duplicate: answering it would double every later packet
                    // (sorcerer's apprentice), so wait for the real one. With
                    // larger windows (RFC 7440) the client lost the window's
                    // first block, so the window is sent again.
                    None => need_send = neg.windowsize > 1,
                }
            }
        }
    }
}
