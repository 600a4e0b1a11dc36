//! The principal of a client that authenticated with its TLS certificate
//! (mutual TLS), as Kafka's `DefaultKafkaPrincipalBuilder` makes it: the
//! certificate subject's distinguished name in RFC 2253 form (Java's
//! `X500Principal.getName()`, e.g. `CN=alice,OU=eng,O=Acme`), mapped by
//! `ssl.principal.mapping.rules` (Kafka's `SslPrincipalMapper`):
//!
//! - `DEFAULT`: the distinguished name as it is;
//! - `RULE:pattern/replacement/[LU]`: when `pattern` (a regex, matched
//!   against the whole name) matches, `replacement` with `$1`... for its
//!   groups, lower-cased with `L` or upper-cased with `U`.
//!
//! Rules are tried in order; a name no rule maps is refused (the
//! connection is closed), as Kafka refuses it. A connection that also
//! authenticates with SASL takes its SASL principal, as in Kafka.

use std::fmt::Write;

use x509_parser::asn1_rs::ToDer;
use x509_parser::prelude::*;

/// One of `ssl.principal.mapping.rules`.
#[derive(Debug)]
enum Rule {
    Default,
    Map {
        pattern: regex::Regex,
        replacement: String,
        case: Option<Case>,
    },
}

#[derive(Debug, Clone, Copy)]
enum Case {
    Lower,
    Upper,
}

/// Kafka's `ssl.principal.mapping.rules`, parsed.
#[derive(Debug)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

impl Default for PrincipalMapper {
    fn default() -> Self {
        PrincipalMapper {
            rules: vec![Rule::Default],
        }
    }
}

/// Splits `rules` at the commas between rules (a rule's own commas are in
/// its pattern or replacement, between slashes, or escaped).
fn split(rules: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut slashes = 0;
    let mut chars = rules.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                current.push(c);
                if let Some(next) = chars.next() {
                    current.push(next);
                }
            }
            '/' => {
                slashes += 1;
                current.push(c);
            }
            // Outside a rule's pattern and replacement: between rules.
            ',' if !current.trim_start().starts_with("RULE:") || slashes >= 2 => {
                out.push(std::mem::take(&mut current));
                slashes = 0;
            }
            c => current.push(c),
        }
    }
    out.push(current);
    out.into_iter()
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty())
        .collect()
}

/// Takes an unescaped part of a rule up to the next unescaped `/`.
fn until_slash(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                // `\/` is a slash; other escapes are the regex's.
                Some((_, '/')) => out.push('/'),
                Some((_, other)) => {
                    out.push('\\');
                    out.push(other);
                }
                None => return None,
            },
            '/' => return Some((out, &s[i + 1..])),
            c => out.push(c),
        }
    }
    None
}

impl PrincipalMapper {
    /// Parses Kafka's rules, or says which one it cannot read.
    pub fn parse(rules: &str) -> anyhow::Result<PrincipalMapper> {
        let mut parsed = Vec::new();
        for rule in split(rules) {
            if rule == "DEFAULT" {
                parsed.push(Rule::Default);
                continue;
            }
            let invalid = || anyhow::anyhow!("invalid rule in ssl principal mapping rules: {rule}");
            let body = rule.strip_prefix("RULE:").ok_or_else(invalid)?;
            let (pattern, rest) = until_slash(body).ok_or_else(invalid)?;
            let (replacement, flags) = until_slash(rest).ok_or_else(invalid)?;
            let case = match flags.trim() {
                "" => None,
                "L" => Some(Case::Lower),
                "U" => Some(Case::Upper),
                _ => return Err(invalid()),
            };
            let pattern = regex::Regex::new(&format!("^(?:{pattern})$"))
                .map_err(|e| anyhow::anyhow!("{}: {e}", invalid()))?;
            parsed.push(Rule::Map {
                pattern,
                replacement,
                case,
            });
        }
        anyhow::ensure!(!parsed.is_empty(), "no ssl principal mapping rules");
        Ok(PrincipalMapper { rules: parsed })
    }

    /// The principal's name for a distinguished name, by the first rule that
    /// maps it.
    pub fn name(&self, dn: &str) -> Option<String> {
        self.rules.iter().find_map(|rule| match rule {
            Rule::Default => Some(dn.to_string()),
            Rule::Map {
                pattern,
                replacement,
                case,
            } => {
                let caps = pattern.captures(dn)?;
                let mut name = String::new();
                caps.expand(replacement, &mut name);
                Some(match case {
                    None => name,
                    Some(Case::Lower) => name.to_lowercase(),
                    Some(Case::Upper) => name.to_uppercase(),
                })
            }
        })
    }
}

/// RFC 2253's keywords, as Java writes them; other attributes are written
/// as their OID with the value's DER in hex.
const KEYWORDS: [(&str, &str); 9] = [
    ("2.5.4.3", "CN"),
    ("2.5.4.6", "C"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.9", "STREET"),
    ("0.9.2342.19200300.100.1.25", "DC"),
    ("0.9.2342.19200300.100.1.1", "UID"),
];

/// A value escaped as RFC 2253 has it.
fn escaped(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The subject of a DER certificate as RFC 2253 writes it: the most
/// specific RDN first, comma-separated, multi-valued RDNs joined by `+`.
pub fn subject_name(der: &[u8]) -> anyhow::Result<String> {
    let (_, cert) = X509Certificate::from_der(der)
        .map_err(|e| anyhow::anyhow!("the client certificate does not parse: {e}"))?;
    let rdns: Vec<String> = cert
        .subject()
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(|attr| {
                    let oid = attr.attr_type().to_id_string();
                    let keyword = KEYWORDS.iter().find(|(o, _)| *o == oid).map(|(_, k)| *k);
                    match (keyword, attr.as_str()) {
                        (Some(k), Ok(value)) => format!("{k}={}", escaped(value)),
                        _ => {
                            let value = attr.attr_value();
                            let mut hex = String::new();
                            for b in value.to_der_vec().unwrap_or_default() {
                                let _ = write!(hex, "{b:02x}");
                            }
                            format!("{}=#{hex}", keyword.map_or(oid, str::to_string))
                        }
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    Ok(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's own examples (`SslPrincipalMapperTest`).
    #[test]
    fn rules_map_names_as_kafkas() {
        let m = PrincipalMapper::parse(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/U, RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT",
        )
        .unwrap();
        assert_eq!(
            m.name("CN=Duke,OU=ServiceUsers,O=Org,C=US").as_deref(),
            Some("duke")
        );
        assert_eq!(
            m.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Palo Alto,ST=CA,C=US")
                .as_deref(),
            Some("DUKE@JAVASOFT")
        );
        assert_eq!(
            m.name("OU=JavaSoft,O=Sun Microsystems,C=US").as_deref(),
            Some("OU=JavaSoft,O=Sun Microsystems,C=US")
        );
        assert_eq!(
            PrincipalMapper::default().name("CN=a,O=b").as_deref(),
            Some("CN=a,O=b")
        );
        // Without DEFAULT, an unmapped name has no principal.
        let strict = PrincipalMapper::parse("RULE:^CN=(.*?),O=Acme$/$1/").unwrap();
        assert_eq!(strict.name("CN=bob,O=Acme").as_deref(), Some("bob"));
        assert_eq!(strict.name("CN=eve,O=Evil"), None);
        // A slash inside a pattern, escaped.
        let slashed = PrincipalMapper::parse("RULE:^CN=(.*)\\/x$/$1/").unwrap();
        assert_eq!(slashed.name("CN=a/x").as_deref(), Some("a"));
        for bad in [
            "",
            "RULE:^CN=(.*)$/$1",
            "RULE:^CN=(.*)$/$1/X",
            "NOPE",
            "RULE:(/x/",
        ] {
            assert!(PrincipalMapper::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn values_are_escaped_as_rfc_2253_has_them() {
        assert_eq!(escaped("a,b+c"), "a\\,b\\+c");
        assert_eq!(escaped(" x "), "\\ x\\ ");
        assert_eq!(escaped("#1"), "\\#1");
    }
}
