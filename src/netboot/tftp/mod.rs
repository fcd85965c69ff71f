//! Read-only TFTP server on tokio UDP sockets.
//!
//! Each read request gets its own socket (its own TID, RFC 1350) and task; files
//! are streamed through a small buffer, at most one window of blocks is held to
//! answer retransmissions. Write requests are refused.

pub mod packet;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, BufReader};
use tokio::net::UdpSocket;

use super::boot_log::{BootLog, BootStep};
use super::files::{Refusal, Source, TftpFiles};
use super::slots::Slots;
use packet::{ErrorCode, Packet, Request};

/// Retransmissions of one packet or window before a transfer is abandoned. Stale
/// ACKs count as retransmissions too, so a transfer without progress ends within
/// `(RETRIES + 1) * packet::MAX_TIMEOUT_SECS` seconds (24 s) whatever the client sends.
pub const RETRIES: u32 = 5;
/// Before the client's first ACK (it may never have asked: a spoofed request), bmo
/// sends at most this many times the request's size.
pub const PRE_ACK_FACTOR: usize = 3;
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

/// The fewest client addresses that can take every TFTP session: the per-client cap
/// is lowered to fit, so that a few clients holding sessions never lock others out.
pub const MIN_CLIENTS_TO_FILL: usize = 32;

/// The session caps for `max_total` sessions and at most `max_per_client` from one
/// address, the latter lowered so that `MIN_CLIENTS_TO_FILL` addresses are needed
/// to take them all.
pub fn session_slots(max_total: usize, max_per_client: usize) -> Slots {
    let fair = (max_total / MIN_CLIENTS_TO_FILL).max(1);
    if max_per_client > fair {
        tracing::info!(
            asked = max_per_client,
            per_client = fair,
            total = max_total,
            "BMO_TFTP_MAX_SESSIONS_PER_CLIENT lowered to a 32nd of the total sessions, so that a few clients cannot hold them all"
        );
    }
    Slots::new(max_total, max_per_client.min(fair))
}

/// Serves read requests arriving on `socket` until the task is dropped. `sessions`
/// caps the transfers running at once, in total and per client; requests over a cap
/// get an ERROR packet and no socket, task or buffer.
pub async fn serve(socket: UdpSocket, files: Arc<TftpFiles>, sessions: Slots, boot_log: BootLog) {
    let mut buf = vec![0u8; 65536];
    loop {
        let (len, peer) = match socket.recv_from(&mut buf).await {
            // A dual-stack socket names IPv4 clients by v4-mapped addresses.
            Ok((len, peer)) => (len, crate::netboot::listen::canonical(peer)),
            Err(e) => {
                tracing::warn!(error = %e, "TFTP receive failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Refusals are cut to what a spoofed request may bring back.
        let refuse = |code, message| packet::error_within(code, message, len * PRE_ACK_FACTOR);
        match packet::parse(&buf[..len]) {
            Ok(Packet::Read(req)) => {
                let slot = match sessions.take(peer.ip()) {
                    Ok(slot) => slot,
                    Err(over) => {
                        tracing::debug!(%peer, ?over, file = %req.filename, "TFTP read refused: too many transfers");
                        let busy = "server busy: too many TFTP transfers, try again shortly";
                        if let Some(answer) = refuse(ErrorCode::NotDefined, busy) {
                            let _ = socket.send_to(&answer, peer).await;
                        }
                        continue;
                    }
                };
                let files = files.clone();
                let sessions = sessions.clone();
                let local = socket.local_addr().ok();
                let boot_log = boot_log.clone();
                tokio::spawn(async move {
                    let (file, started) = (req.filename.clone(), Instant::now());
                    let sent = transfer(peer, local, req, len, &files).await;
                    if let Err(e) = &sent {
                        tracing::debug!(%peer, error = %e, "TFTP transfer ended early");
                    }
                    boot_log.transfer(peer.ip(), logged(file, sent, started.elapsed()));
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
                let read_only = "bmo's TFTP server is read-only";
                if let Some(answer) = refuse(ErrorCode::AccessViolation, read_only) {
                    let _ = socket.send_to(&answer, peer).await;
                }
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

/// What bmo may still send to a client that has not acknowledged anything yet:
/// `PRE_ACK_FACTOR` times its request's size. A request that gets no OACK (it named
/// no option bmo acknowledges) may only be answered with its first block (RFC 1350),
/// which is sent once whatever its size.
#[derive(Debug)]
struct Budget {
    /// `None` once the client has acknowledged a packet: no limit then.
    left: Option<usize>,
    free_first: bool,
}

impl Budget {
    fn new(request_len: usize) -> Self {
        Self {
            left: Some(request_len.saturating_mul(PRE_ACK_FACTOR)),
            free_first: false,
        }
    }

    /// The first block may be sent once even if it does not fit: no OACK goes first.
    fn allow_first_block(&mut self) {
        self.free_first = true;
    }

    fn heard_from_client(&self) -> bool {
        self.left.is_none()
    }

    fn heard(&mut self) {
        self.left = None;
    }

    /// Whether `len` more bytes may be sent, taking them from the budget if so.
    fn take(&mut self, len: usize) -> bool {
        match &mut self.left {
            None => true,
            Some(left) if *left >= len => {
                *left -= len;
                // The first block went within the budget: no free send is left.
                self.free_first = false;
                true
            }
            Some(_) if self.free_first => {
                self.free_first = false;
                self.left = Some(0);
                true
            }
            Some(_) => false,
        }
    }

    /// Sends an ERROR, its message cut to the budget, and ends the transfer.
    async fn refuse(
        &mut self,
        sock: &UdpSocket,
        code: ErrorCode,
        message: &str,
        why: &'static str,
    ) -> Result<(), TransferError> {
        let max = self.left.unwrap_or(usize::MAX);
        if let Some(pkt) = packet::error_within(code, message, max) {
            self.take(pkt.len());
            sock.send(&pkt).await?;
        }
        Err(TransferError::Refused(why))
    }
}

async fn connect(peer: SocketAddr, local: Option<SocketAddr>) -> std::io::Result<UdpSocket> {
    let bind: SocketAddr = match (local, peer) {
        (Some(l), _) if !l.ip().is_unspecified() => SocketAddr::new(l.ip(), 0),
        (_, SocketAddr::V4(_)) => SocketAddr::from(([0, 0, 0, 0], 0)),
        (_, SocketAddr::V6(_)) => SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0)),
    };
    let sock = UdpSocket::bind(bind).await?;
    sock.connect(peer).await?;
    Ok(sock)
}

type Reader = Box<dyn AsyncRead + Unpin + Send>;

/// Opens the requested file, or what to answer instead.
fn open(files: &TftpFiles, filename: &str) -> Result<(Reader, u64), (ErrorCode, &'static str)> {
    match files.resolve(filename) {
        Ok(Source::Embedded { data, .. }) => {
            let len = data.len() as u64;
            Ok((Box::new(std::io::Cursor::new(data)), len))
        }
        Ok(Source::File(opened)) => {
            let len = opened.metadata.len();
            let file = tokio::fs::File::from_std(opened.file);
            Ok((Box::new(BufReader::with_capacity(READ_BUFFER, file)), len))
        }
        Err(Refusal::NotFound) => Err((ErrorCode::FileNotFound, "file not found")),
        Err(Refusal::Outside) => Err((
            ErrorCode::AccessViolation,
            "path outside the served directories",
        )),
    }
}

async fn transfer(
    peer: SocketAddr,
    local: Option<SocketAddr>,
    req: Request,
    request_len: usize,
    files: &TftpFiles,
) -> Result<u64, TransferError> {
    let sock = connect(peer, local).await?;
    let mut budget = Budget::new(request_len);
    if let Some(name) = req.duplicate_option() {
        tracing::debug!(%peer, option = name, "TFTP read with a repeated option refused");
        let msg = "each option may be given once";
        return budget
            .refuse(&sock, ErrorCode::OptionRefused, msg, "duplicate option")
            .await
            .map(|()| 0);
    }
    if req.mode != "octet" && req.mode != "netascii" {
        let msg = "only octet mode is supported";
        return budget
            .refuse(&sock, ErrorCode::IllegalOperation, msg, "mode")
            .await
            .map(|()| 0);
    }
    let (reader, size) = match open(files, &req.filename) {
        Ok(opened) => opened,
        Err((code, msg)) => {
            tracing::debug!(%peer, file = %req.filename, msg, "TFTP read refused");
            return budget.refuse(&sock, code, msg, msg).await.map(|()| 0);
        }
    };
    let neg = packet::negotiate(&req, size, packet::MAX_BLKSIZE);
    let timeout = neg
        .timeout_secs
        .map_or(DEFAULT_TIMEOUT, |s| Duration::from_secs(u64::from(s)));
    let mut buf = vec![0u8; ACK_BUFFER];
    if neg.acked.is_empty() {
        budget.allow_first_block();
    } else {
        acknowledge_options(&sock, &neg, timeout, &mut budget, &mut buf).await?;
    }
    tracing::debug!(%peer, file = %req.filename, size, blksize = neg.blksize, windowsize = neg.windowsize, "TFTP transfer");
    send_file(&sock, reader, &neg, timeout, &mut budget, &mut buf).await?;
    Ok(size)
}

/// Sends the OACK until the client acknowledges it (block 0).
async fn acknowledge_options(
    sock: &UdpSocket,
    neg: &packet::Negotiated,
    timeout: Duration,
    budget: &mut Budget,
    buf: &mut [u8],
) -> Result<(), TransferError> {
    let oack = packet::oack(&neg.acked);
    let mut tries = 0;
    let mut send = true;
    loop {
        if send && budget.take(oack.len()) {
            sock.send(&oack).await?;
        }
        match recv_ack(sock, buf, timeout.min(FIRST_TIMEOUT)).await? {
            Some(0) => break,
            // Not what was asked: counts as a retry, without answering.
            Some(_) => send = false,
            None => send = true,
        }
        tries += 1;
        if tries > FIRST_RETRIES {
            return Err(TransferError::Timeout);
        }
    }
    budget.heard();
    Ok(())
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

/// The blocks sent and not yet acknowledged, encoded as DATA packets.
struct Window {
    packets: VecDeque<Vec<u8>>,
    spare: Vec<Vec<u8>>,
    /// Block index of `packets[0]`.
    first: u64,
    /// Block index of the next block to read.
    next: u64,
    last_block: Option<u64>,
    payload: Vec<u8>,
    size: usize,
}

impl Window {
    fn new(neg: &packet::Negotiated) -> Self {
        Self {
            packets: VecDeque::with_capacity(usize::from(neg.windowsize)),
            spare: Vec::new(),
            first: 1,
            next: 1,
            last_block: None,
            payload: vec![0u8; neg.blksize],
            size: usize::from(neg.windowsize),
        }
    }

    async fn refill(&mut self, reader: &mut (dyn AsyncRead + Unpin + Send)) -> std::io::Result<()> {
        while self.packets.len() < self.size && self.last_block.is_none() {
            let n = read_block(reader, &mut self.payload).await?;
            let mut pkt = self.spare.pop().unwrap_or_default();
            // Block numbers roll over from 65535 to 0, as common clients expect.
            packet::data(self.next as u16, &self.payload[..n], &mut pkt);
            self.packets.push_back(pkt);
            if n < self.payload.len() {
                self.last_block = Some(self.next);
            }
            self.next += 1;
        }
        Ok(())
    }

    /// Applies an ACK: `None` if it acknowledges no block of the window (stale),
    /// else whether the file is done.
    fn ack(&mut self, block: u16) -> Option<bool> {
        let idx = (0..self.packets.len() as u64)
            .map(|i| self.first + i)
            .find(|idx| *idx as u16 == block)?;
        for _ in self.first..=idx {
            if let Some(p) = self.packets.pop_front() {
                self.spare.push(p);
            }
        }
        self.first = idx + 1;
        Some(self.last_block == Some(idx))
    }
}

async fn send_file(
    sock: &UdpSocket,
    mut reader: Reader,
    neg: &packet::Negotiated,
    timeout: Duration,
    budget: &mut Budget,
    buf: &mut [u8],
) -> Result<(), TransferError> {
    let mut window = Window::new(neg);
    let mut tries = 0;
    let mut need_send = true;
    // Whether the window was sent again for a stale ACK since the last progress.
    let mut resent_for_stale = false;
    loop {
        window.refill(reader.as_mut()).await?;
        if need_send {
            for pkt in &window.packets {
                if budget.take(pkt.len()) {
                    sock.send(pkt).await?;
                }
            }
        }
        need_send = true;
        let (wait, retries) = if budget.heard_from_client() {
            (timeout, RETRIES)
        } else {
            (timeout.min(FIRST_TIMEOUT), FIRST_RETRIES)
        };
        let progress = match recv_ack(sock, buf, wait).await? {
            None => false,
            Some(ack) => {
                budget.heard();
                match window.ack(ack) {
                    Some(true) => return Ok(()),
                    Some(false) => true,
                    // An ACK from before the window. With windowsize 1 it is a
                    // duplicate: answering it would double every later packet
                    // (sorcerer's apprentice), so wait for the real one. With
                    // larger windows (RFC 7440) the client lost the window's first
                    // block, so the window is sent again, once: more stale ACKs
                    // wait for the timeout.
                    None => {
                        need_send = neg.windowsize > 1 && !resent_for_stale;
                        resent_for_stale |= need_send;
                        false
                    }
                }
            }
        };
        if progress {
            tries = 0;
            resent_for_stale = false;
        } else {
            tries += 1;
            if tries > retries {
                return Err(TransferError::Timeout);
            }
        }
    }
}

/// What the boot log records of a transfer.
fn logged(file: String, sent: Result<u64, TransferError>, took: Duration) -> BootStep {
    let (bytes, outcome) = match sent {
        Ok(size) => (size, "sent".to_owned()),
        Err(e) => (0, e.to_string()),
    };
    BootStep::Tftp {
        file,
        bytes,
        millis: crate::netboot::boot_log::millis(took),
        outcome,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixteen_clients_cannot_take_every_session() {
        let slots = session_slots(64, 4);
        let mut held = Vec::new();
        for n in 0..16u8 {
            let client = std::net::IpAddr::from([10, 0, 0, n]);
            held.extend((0..4).filter_map(|_| slots.take(client).ok()));
        }
        assert_eq!(held.len(), 32);
        assert!(slots.take([10, 0, 1, 1].into()).is_ok());
        // A small cap still lets each client one session.
        let slots = session_slots(8, 4);
        let first = slots.take([10, 0, 0, 1].into());
        assert!(first.is_ok());
        assert!(slots.take([10, 0, 0, 1].into()).is_err());
    }

    #[test]
    fn before_the_first_ack_the_budget_is_three_times_the_request() {
        let mut with_options = Budget::new(20);
        assert!(with_options.take(40));
        assert!(!with_options.take(21));
        assert!(with_options.take(20));
        with_options.heard();
        assert!(with_options.take(1 << 20));
        // A request answered without an OACK gets its first block once, nothing more.
        let mut plain = Budget::new(20);
        plain.allow_first_block();
        assert!(plain.take(516));
        assert!(!plain.take(516));
        assert!(!plain.take(1));
        // Also when the request is large enough for the first block to fit: it is not
        // sent again for free once the budget runs short.
        let mut long = Budget::new(200);
        long.allow_first_block();
        assert!(long.take(516));
        assert!(!long.take(516));
    }
}
