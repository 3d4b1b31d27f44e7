//! Flow search: which flows' text — "src dst proto src_port dst_port", as the API shows them —
//! contains what the user typed (the UI's filter box, `GET /api/flows?q=`).
//!
//! Writing out every flow's text costs ~55 ns a flow, 55 ms a request at a million flows, with
//! the state locked. A text without spaces can only fall inside one field, so for those the
//! IPv4 addresses, the protocol and the ports are matched with tables built once per search, and
//! only what the tables cannot answer (IPv6 addresses) is written out. Texts with spaces are
//! matched against the whole line.

use memchr::memmem::Finder;
use std::net::{IpAddr, Ipv4Addr};

use crate::event::{write_flow_text, write_ip};
use intscope_wire::locate::FlowKey;

/// One search, ready to test flows.
pub struct FlowSearch {
    finder: Finder<'static>,
    /// Tables for a text that cannot span fields; `None` when it can (it has a space).
    fields: Option<Fields>,
    /// Scratch for the text of what the tables cannot answer.
    text: Vec<u8>,
}

/// How a text without spaces can occur in each field.
struct Fields {
    /// For each number 0–65535 (protocols and ports): its decimal text contains the search.
    /// Empty when the search is not all digits, so no number can contain it.
    numbers: Vec<bool>,
    /// How it can occur in a dotted IPv4 address.
    ipv4: Ipv4Pattern,
}

/// Where a text without spaces can occur in "a.b.c.d".
enum Ipv4Pattern {
    /// Nowhere (it holds something other than digits and dots, or cannot fit).
    Never,
    /// Digits only: inside one octet, where `octets[n]` says whether octet `n` holds it.
    InOctet(Box<[bool; 256]>),
    /// `k` dots: the end of one octet, `k - 1` whole octets, the start of the next.
    Across {
        ends: Box<[bool; 256]>,
        whole: Vec<u8>,
        starts: Box<[bool; 256]>,
    },
}

impl FlowSearch {
    /// A search for `text` (matched as given: the API lowercases it, as addresses are written).
    pub fn new(text: &str) -> Self {
        // The empty text is in every flow's: the whole-line path says so.
        let fields = (!text.is_empty() && !text.contains(' ')).then(|| Fields {
            numbers: if is_digits(text) {
                (0..=u16::MAX).map(|n| decimal(n).contains(text)).collect()
            } else {
                Vec::new()
            },
            ipv4: Ipv4Pattern::of(text),
        });
        FlowSearch {
            finder: Finder::new(text.as_bytes()).into_owned(),
            fields,
            text: Vec::with_capacity(96),
        }
    }

    /// Whether flow `k`'s text contains the search.
    pub fn matches(&mut self, k: &FlowKey) -> bool {
        let Some(fields) = &self.fields else {
            self.text.clear();
            write_flow_text(&mut self.text, k);
            return self.finder.find(&self.text).is_some();
        };
        let number = |n: u16| fields.numbers.get(usize::from(n)).copied() == Some(true);
        if number(u16::from(k.proto)) || number(k.src_port) || number(k.dst_port) {
            return true;
        }
        for ip in [k.src_ip(), k.dst_ip()] {
            let found = match ip {
                IpAddr::V4(v4) => fields.ipv4.matches(v4),
                IpAddr::V6(_) => {
                    self.text.clear();
                    write_ip(&mut self.text, ip);
                    self.finder.find(&self.text).is_some()
                }
            };
            if found {
                return true;
            }
        }
        false
    }
}

impl Ipv4Pattern {
    fn of(text: &str) -> Self {
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Ipv4Pattern::Never;
        }
        let parts: Vec<&str> = text.split('.').collect();
        let octet_table = |test: &dyn Fn(&str) -> bool| {
            let mut table = Box::new([false; 256]);
            for (n, hit) in table.iter_mut().enumerate() {
                *hit = test(&decimal(n as u16));
            }
            table
        };
        match parts.as_slice() {
            [digits] => Ipv4Pattern::InOctet(octet_table(&|o| o.contains(digits))),
            [first, middle @ .., last] if middle.len() <= 2 => {
                // A whole octet is written without leading zeros: only such a part can be one.
                let whole: Option<Vec<u8>> = middle
                    .iter()
                    .map(|m| {
                        m.parse::<u8>()
                            .ok()
                            .filter(|v| decimal(u16::from(*v)) == *m)
                    })
                    .collect();
                match whole {
                    Some(whole) => Ipv4Pattern::Across {
                        ends: octet_table(&|o| o.ends_with(first)),
                        whole,
                        starts: octet_table(&|o| o.starts_with(last)),
                    },
                    None => Ipv4Pattern::Never,
                }
            }
            _ => Ipv4Pattern::Never,
        }
    }

    fn matches(&self, ip: Ipv4Addr) -> bool {
        let o = ip.octets();
        match self {
            Ipv4Pattern::Never => false,
            Ipv4Pattern::InOctet(has) => o.iter().any(|&b| has[usize::from(b)]),
            Ipv4Pattern::Across {
                ends,
                whole,
                starts,
            } => {
                let dots = whole.len() + 1;
                (0..o.len() - dots).any(|at| {
                    ends[usize::from(o[at])]
                        && o[at + 1..at + dots] == whole[..]
                        && starts[usize::from(o[at + dots])]
                })
            }
        }
    }
}

fn is_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

fn decimal(n: u16) -> String {
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv6Addr;

    fn key(src: IpAddr, dst: IpAddr, proto: u8, src_port: u16, dst_port: u16) -> FlowKey {
        let mapped = |ip: IpAddr| match ip {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        };
        FlowKey {
            src: mapped(src),
            dst: mapped(dst),
            proto,
            src_port,
            dst_port,
        }
    }

    fn written(k: &FlowKey) -> String {
        let mut text = Vec::new();
        write_flow_text(&mut text, k);
        String::from_utf8(text).unwrap()
    }

    fn address() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            3 => any::<[u8; 4]>().prop_map(|o| IpAddr::from(Ipv4Addr::from(o))),
            1 => any::<[u16; 8]>().prop_map(|s| IpAddr::from(Ipv6Addr::from(s))),
        ]
    }

    proptest! {
        /// The tables agree with writing the flow out and looking for the text in it, for
        /// texts made of what flow text is made of, and for pieces of the flow's own text.
        #[test]
        fn a_search_matches_what_the_written_flow_contains(
            src in address(),
            dst in address(),
            proto: u8,
            src_port: u16,
            dst_port: u16,
            random in "[0-9.: a-f]{1,9}",
            from in 0usize..60,
            len in 1usize..12,
        ) {
            let k = key(src, dst, proto, src_port, dst_port);
            let text = written(&k);
            let piece = text.get(from.min(text.len() - 1)..(from + len).min(text.len())).unwrap_or("0");
            for needle in [random.as_str(), piece] {
                prop_assert_eq!(
                    FlowSearch::new(needle).matches(&k),
                    text.contains(needle),
                    "{:?} in {:?}", needle, text
                );
            }
        }
    }

    #[test]
    fn searches_across_octets_find_only_whole_octets_between() {
        let k = key(
            "10.1.20.3".parse().unwrap(),
            "192.168.0.1".parse().unwrap(),
            17,
            4789,
            53,
        );
        for (needle, found) in [
            ("0.1.2", true),
            ("10.1.20.3", true),
            (".1.20.", true),
            ("1.2.3", false),
            ("01.20", false),
            ("168.0", true),
            ("8.0.1", true),
            ("478", true),
            ("53", true),
            ("17 4789", true),
            ("3 192", true),
            ("1.1", false),
        ] {
            assert_eq!(FlowSearch::new(needle).matches(&k), found, "{needle}");
        }
    }
}
