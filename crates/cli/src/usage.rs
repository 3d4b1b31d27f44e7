//! Exit statuses and the command line's address values.
//!
//! `intscope` exits 2 when the command line is wrong and 1 when the command could not do its job
//! (a file that cannot be read or is damaged, a port in use, a store that does not answer). clap
//! exits 2 for the mistakes it finds itself (an unknown flag, `--duration abc`); the checks clap
//! cannot express (`--duration 0`, a `--store` scheme, a missing `--in`) return a [`Usage`] error
//! so that the same kind of mistake gets the same status wherever it is found, and a script can
//! tell "fix the invocation" from "something went wrong" by the status alone.

use std::net::{SocketAddr, ToSocketAddrs};

/// A mistake in the command line: `main` exits 2 for it, as clap does for its own.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// A [`Usage`] error with this message.
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(msg.into()))
}

/// Returns early with a [`Usage`] error (exit status 2): `bail_usage!("--x must be ...")`.
macro_rules! bail_usage {
    ($($arg:tt)*) => {
        return Err($crate::usage::usage(format!($($arg)*)))
    };
}
pub(crate) use bail_usage;

/// Whether `e`, or anything it wraps, is a [`Usage`] error.
pub fn is_usage(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<Usage>())
}

/// clap's parser for `HOST:PORT` options: an address (`127.0.0.1:8080`, `[::1]:8080`) or a host
/// name (`localhost:8080`, `collector.example:32766`), resolved once here. Of a name's addresses
/// the first IPv4 one is taken when there is one: the collector listens on `0.0.0.0` (IPv4) by
/// default, and `localhost` often resolves to `::1` first, which would miss it.
pub fn host_port(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if !s
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
    {
        return Err(format!(
            "'{s}' is not HOST:PORT (e.g. 127.0.0.1:8080, [::1]:8080 or localhost:8080)"
        ));
    }
    let addrs: Vec<SocketAddr> = s
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve '{s}': {e}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("'{s}' resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_takes_addresses_and_names() {
        assert_eq!(
            host_port("127.0.0.1:80").unwrap().to_string(),
            "127.0.0.1:80"
        );
        assert_eq!(host_port("[::1]:80").unwrap().to_string(), "[::1]:80");
        let a = host_port("localhost:8080").unwrap();
        assert!(a.ip().is_loopback() && a.port() == 8080, "{a}");
        assert!(
            host_port("localhost")
                .unwrap_err()
                .contains("not HOST:PORT")
        );
        assert!(host_port(":80").is_err());
        assert!(host_port("localhost:99999").is_err());
        assert!(
            host_port("no-such-host.invalid:80")
                .unwrap_err()
                .contains("cannot resolve")
        );
    }

    #[test]
    fn usage_errors_are_found_under_context() {
        use anyhow::Context;
        let e: anyhow::Result<()> = Err(usage("--x is wrong"));
        assert!(is_usage(&e.context("while starting").unwrap_err()));
        assert!(!is_usage(&anyhow::anyhow!("a port in use")));
    }
}
