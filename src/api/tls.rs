//! TLS on one API connection (issue 12): rustls's `ServerConnection` driven by
//! hand on the loop's non-blocking socket, so the server stays a set of
//! non-blocking state machines (DESIGN §5) and TLS adds no task and no thread.
//!
//! Owns: telling a plain HTTP request from a TLS record on the TLS port (peeking
//! one byte), moving ciphertext between the socket and rustls one bounded step at
//! a time, counting handshake work against the service pass's allowance
//! ([`super::server::HANDSHAKE_STEPS_PER_SERVICE`]: a handshake is a signature, so
//! a flood of TLS clients costs at most that many per pass and can never hold the
//! loop past `F - B`, S1), and whether the client presented a verified certificate.
//! Must never: block (every socket call is `try_*`; rustls sees `WouldBlock` as
//! "no more now"), run more than one `read_tls` per connection per step, or let a
//! TLS error panic or reach the loop (it ends the connection, logged at debug).

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::Arc;

use rustls::{ServerConfig, ServerConnection};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// The socket as `Read`/`Write` for rustls, without ever blocking.
struct Sock<'a>(&'a TcpStream);

impl Read for Sock<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for Sock<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What one read step produced.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Got {
    /// Plaintext bytes were put in the buffer.
    Data(usize),
    /// Nothing more for now (the socket would block).
    Nothing,
    /// The client closed the connection.
    Closed,
    /// A plain HTTP request arrived on the TLS port.
    PlainHttp,
    /// The handshake allowance of this pass is used up: the step was skipped,
    /// the socket's readiness is kept for the next pass.
    Throttled,
    /// A TLS error ended the connection (the alert, if any, was sent).
    Failed(String),
}

/// TLS state of one connection.
pub(super) struct Tls {
    conn: ServerConnection,
    /// The first byte was seen and starts a TLS record.
    sniffed: bool,
}

impl Tls {
    pub(super) fn new(config: Arc<ServerConfig>) -> Result<Tls, String> {
        let conn = ServerConnection::new(config).map_err(|e| e.to_string())?;
        Ok(Tls {
            conn,
            sniffed: false,
        })
    }

    /// Whether the client presented a certificate that verified (rustls keeps
    /// peer certificates only after its verifier accepted them).
    pub(super) fn client_cert_verified(&self) -> bool {
        !self.conn.is_handshaking() && self.conn.peer_certificates().is_some_and(|c| !c.is_empty())
    }

    /// Ciphertext waits to be written (a handshake flight, an alert).
    pub(super) fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// One read step: at most one `read_tls` from the socket, the records it
    /// completed processed (a handshake step only while `handshake_steps` > 0,
    /// which it then decrements), the handshake's answer flushed, and the
    /// plaintext now available copied into `buf`.
    pub(super) fn read(
        &mut self,
        stream: &TcpStream,
        buf: &mut [u8],
        handshake_steps: &mut usize,
    ) -> Got {
        if !self.sniffed {
            let mut first = [0u8; 1];
            let peeked = stream.try_io(Interest::READABLE, || {
                nix::sys::socket::recv(
                    stream.as_raw_fd(),
                    &mut first,
                    nix::sys::socket::MsgFlags::MSG_PEEK,
                )
                .map_err(io::Error::from)
            });
            match peeked {
                Ok(0) => return Got::Closed,
                Ok(_) if crate::tls::looks_like_plain_http(&first) => return Got::PlainHttp,
                Ok(_) => self.sniffed = true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Got::Nothing,
                Err(e) => return Got::Failed(e.to_string()),
            }
        }
        let handshaking = self.conn.is_handshaking();
        if handshaking && *handshake_steps == 0 {
            return Got::Throttled;
        }
        match self.conn.read_tls(&mut Sock(stream)) {
            Ok(0) => return Got::Closed,
            Ok(_) => {
                if handshaking {
                    *handshake_steps -= 1;
                }
                if let Err(e) = self.conn.process_new_packets() {
                    // The alert rustls queued, once, best effort: the connection ends.
                    let _ = self.conn.write_tls(&mut Sock(stream));
                    return Got::Failed(e.to_string());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Got::Failed(e.to_string()),
        }
        if let Err(e) = self.flush(stream) {
            return Got::Failed(e.to_string());
        }
        let mut n = 0;
        while n < buf.len() {
            match self.conn.reader().read(&mut buf[n..]) {
                Ok(0) if n == 0 => return Got::Closed,
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) if n == 0 => return Got::Closed,
                Err(_) => break,
            }
        }
        if n > 0 { Got::Data(n) } else { Got::Nothing }
    }

    /// Write what rustls holds to the socket until it would block. `Ok(true)`:
    /// nothing is left.
    pub(super) fn flush(&mut self, stream: &TcpStream) -> io::Result<bool> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut Sock(stream)) {
                Ok(0) => return Ok(false),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Hand plaintext to rustls (as much as its buffer limit takes) and flush.
    /// Returns how many bytes of `data` were taken.
    pub(super) fn write(&mut self, stream: &TcpStream, data: &[u8]) -> io::Result<usize> {
        let n = if data.is_empty() {
            0
        } else {
            self.conn.writer().write(data)?
        };
        self.flush(stream)?;
        Ok(n)
    }

    /// The answer is out: say so to the client (close_notify), best effort.
    pub(super) fn close(&mut self, stream: &TcpStream) {
        self.conn.send_close_notify();
        let _ = self.flush(stream);
    }
}
