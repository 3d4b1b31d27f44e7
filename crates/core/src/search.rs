//! Flow search: which flows' text — "src dst proto src_port dst_port", as the API shows them —
//! contains what the user typed (the UI's filter box, `GET /api/flows?q=`).
//!
//! Writing out every flow's text costs ~55 ns a flow, 55 ms a request at a million flows, with
//! the state locked. So nothing is written per flow unless it must be: the text is cut at its
//! spaces into tokens, and a match is the first token ending one field, the middle ones equal to
//! the fields after it, the last one starting the next (a text without spaces: inside one
//! field). Each token becomes tables built once per search, for the numbers (protocol, ports)
//! and the octets of IPv4 addresses; only IPv6 addresses are written out.

use std::net::{IpAddr, Ipv4Addr};

use intscope_wire::locate::FlowKey;

use crate::flow_ref::write_ip;

/// Fields in a flow's line.
const FIELDS: usize = 5;

/// One search, ready to test flows.
pub struct FlowSearch {
    /// One per token. A single token may lie anywhere in a field; with several, the first ends
    /// a field, the middle ones are whole fields and the last starts one.
    tokens: Vec<Token>,
    /// Scratch for an IPv6 address's text.
    text: Vec<u8>,
}

/// Where a token must sit in a field's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Anchor {
    Anywhere,
    /// At the field's end.
    End,
    /// At its start.
    Start,
    /// The whole field.
    Whole,
}

impl Anchor {
    fn holds(self, field: &str, token: &str) -> bool {
        match self {
            Anchor::Anywhere => field.contains(token),
            Anchor::End => field.ends_with(token),
            Anchor::Start => field.starts_with(token),
            Anchor::Whole => field == token,
        }
    }
}

/// One token of the search, ready to test a field.
struct Token {
    text: String,
    anchor: Anchor,
    /// For each number 0–65535: whether its decimal text holds the token (empty: none does).
    numbers: Vec<bool>,
    ipv4: Ipv4Pattern,
}

/// Where a token can sit in "a.b.c.d".
enum Ipv4Pattern {
    /// Nowhere.
    Never,
    /// Without dots: in one octet, one of `octets`, where `holds[o]` says whether octet value
    /// `o`'s text holds it.
    InOctet {
        octets: std::ops::Range<usize>,
        holds: Box<[bool; 256]>,
    },
    /// With dots: the end (or all) of the octet at one of `starts`, whole octets, the start (or
    /// all) of the next.
    Across {
        starts: std::ops::Range<usize>,
        first: Box<[bool; 256]>,
        whole: Vec<u8>,
        last: Box<[bool; 256]>,
    },
}

impl FlowSearch {
    /// A search for `text` (matched as given: the API lowercases it, as addresses are written).
    pub fn new(text: &str) -> Self {
        let parts: Vec<&str> = text.split(' ').collect();
        let n = parts.len();
        let tokens = parts
            .iter()
            .enumerate()
            .map(|(i, part)| {
                let anchor = match (i == 0, i + 1 == n) {
                    (true, true) => Anchor::Anywhere,
                    (true, false) => Anchor::End,
                    (false, true) => Anchor::Start,
                    (false, false) => Anchor::Whole,
                };
                Token::new(part, anchor)
            })
            .collect();
        FlowSearch {
            tokens,
            text: Vec::with_capacity(40),
        }
    }

    /// Whether flow `k`'s text contains the search.
    pub fn matches(&mut self, k: &FlowKey) -> bool {
        let text = &mut self.text;
        let fields = [
            Field::Ip(k.src_ip()),
            Field::Ip(k.dst_ip()),
            Field::Number(u16::from(k.proto)),
            Field::Number(k.src_port),
            Field::Number(k.dst_port),
        ];
        if let [token] = &self.tokens[..] {
            // Inside any one field: the usual search. Numbers first, they are a table lookup.
            return fields.iter().rev().any(|field| token.holds(field, text));
        }
        let n = self.tokens.len();
        if n > FIELDS {
            return false;
        }
        (0..=FIELDS - n).any(|first| {
            self.tokens
                .iter()
                .zip(&fields[first..])
                .all(|(token, field)| token.holds(field, text))
        })
    }
}

/// One field of a flow's line.
enum Field {
    Ip(IpAddr),
    Number(u16),
}

impl Token {
    fn new(text: &str, anchor: Anchor) -> Self {
        let numbers = if text.bytes().all(|b| b.is_ascii_digit()) {
            let mut digits = [0u8; 5];
            (0..=u16::MAX)
                .map(|n| anchor.holds(decimal(n, &mut digits), text))
                .collect()
        } else {
            Vec::new()
        };
        Token {
            text: text.to_owned(),
            anchor,
            numbers,
            ipv4: Ipv4Pattern::of(text, anchor),
        }
    }

    fn holds(&self, field: &Field, scratch: &mut Vec<u8>) -> bool {
        match *field {
            Field::Number(n) => self.numbers.get(usize::from(n)).copied() == Some(true),
            Field::Ip(IpAddr::V4(v4)) => self.ipv4.holds(v4),
            Field::Ip(ip) => {
                scratch.clear();
                write_ip(scratch, ip);
                // Addresses are written in ASCII.
                std::str::from_utf8(scratch).is_ok_and(|t| self.anchor.holds(t, &self.text))
            }
        }
    }
}

impl Ipv4Pattern {
    fn of(text: &str, anchor: Anchor) -> Self {
        if !text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Ipv4Pattern::Never;
        }
        let octet_table = |part: &str, anchor: Anchor| {
            let mut digits = [0u8; 5];
            let mut table = Box::new([false; 256]);
            for (o, hit) in table.iter_mut().enumerate() {
                *hit = anchor.holds(decimal(o as u16, &mut digits), part);
            }
            table
        };
        let parts: Vec<&str> = text.split('.').collect();
        let dots = parts.len() - 1;
        let starts_at_start = matches!(anchor, Anchor::Start | Anchor::Whole);
        let ends_at_end = matches!(anchor, Anchor::End | Anchor::Whole);
        if dots > 3 || (anchor == Anchor::Whole && dots != 3) {
            return Ipv4Pattern::Never;
        }
        // The octets the token's first part can be in.
        let lowest = 0;
        let highest = 3 - dots;
        let range = match (starts_at_start, ends_at_end) {
            (true, _) => lowest..lowest + 1,
            (false, true) => highest..highest + 1,
            (false, false) => lowest..highest + 1,
        };
        match parts.as_slice() {
            [part] => Ipv4Pattern::InOctet {
                octets: range,
                holds: octet_table(part, anchor),
            },
            [first, middle @ .., last] => {
                // A whole octet is written without leading zeros: only such a part can be one.
                let mut digits = [0u8; 5];
                let whole: Option<Vec<u8>> = middle
                    .iter()
                    .map(|m| {
                        m.parse::<u8>()
                            .ok()
                            .filter(|v| decimal(u16::from(*v), &mut digits) == *m)
                    })
                    .collect();
                let (first_anchor, last_anchor) = (
                    if starts_at_start {
                        Anchor::Whole
                    } else {
                        Anchor::End
                    },
                    if ends_at_end {
                        Anchor::Whole
                    } else {
                        Anchor::Start
                    },
                );
                match whole {
                    Some(whole) => Ipv4Pattern::Across {
                        starts: range,
                        first: octet_table(first, first_anchor),
                        whole,
                        last: octet_table(last, last_anchor),
                    },
                    None => Ipv4Pattern::Never,
                }
            }
            [] => Ipv4Pattern::Never,
        }
    }

    fn holds(&self, ip: Ipv4Addr) -> bool {
        let o = ip.octets();
        match self {
            Ipv4Pattern::Never => false,
            Ipv4Pattern::InOctet { octets, holds } => o
                .get(octets.clone())
                .is_some_and(|o| o.iter().any(|&b| holds[usize::from(b)])),
            Ipv4Pattern::Across {
                starts,
                first,
                whole,
                last,
            } => {
                let dots = whole.len() + 1;
                starts.clone().any(|at| {
                    first[usize::from(o[at])]
                        && o[at + 1..at + dots] == whole[..]
                        && last[usize::from(o[at + dots])]
                })
            }
        }
    }
}

/// `n` in decimal, written into `digits`.
fn decimal(n: u16, digits: &mut [u8; 5]) -> &str {
    let mut at = digits.len();
    let mut n = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Digits are ASCII.
    std::str::from_utf8(&digits[at..]).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow_ref::FlowRef;
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

    /// The flow's line as the API shows the flow: what a search is defined against.
    fn written(k: &FlowKey) -> String {
        let r = FlowRef::from(k);
        format!(
            "{} {} {} {} {}",
            r.src, r.dst, r.proto, r.src_port, r.dst_port
        )
    }

    fn address() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            3 => any::<[u8; 4]>().prop_map(|o| IpAddr::from(Ipv4Addr::from(o))),
            1 => (0..3u8, any::<[u16; 8]>()).prop_map(|(zeros, s)| {
                // Runs of zeros, so that "::" appears too.
                let mut s = s;
                s[2..2 + usize::from(zeros) * 2].fill(0);
                IpAddr::from(Ipv6Addr::from(s))
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        /// The tables agree with writing the flow's line out and looking for the text in it, for
        /// texts made of what lines are made of, and for pieces of the flow's own line.
        #[test]
        fn a_search_matches_what_the_written_flow_contains(
            src in address(),
            dst in address(),
            proto: u8,
            src_port: u16,
            dst_port: u16,
            random in "[0-9.: a-f]{0,9}",
            from in 0usize..60,
            len in 0usize..30,
        ) {
            let k = key(src, dst, proto, src_port, dst_port);
            let text = written(&k);
            let from = from.min(text.len());
            let piece = &text[from..(from + len).min(text.len())];
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
    fn searches_find_pieces_of_fields_and_whole_fields_between() {
        let k = key(
            "10.1.20.3".parse().unwrap(),
            "192.168.0.1".parse().unwrap(),
            17,
            4789,
            53,
        );
        for (needle, found) in [
            ("", true),
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
            ("3 192.168.0.1 1", true),
            ("3 192.168.0.1 2", false),
            (".3 192.168", true),
            ("20.3 19", true),
            ("1.20.3 192.168.0.1 17 4789 53", true),
            ("10.1.20.3 192.168.0.1 17 4789 53 ", false),
            ("1.1", false),
            (" ", true),
        ] {
            assert_eq!(FlowSearch::new(needle).matches(&k), found, "{needle:?}");
        }
    }
}
