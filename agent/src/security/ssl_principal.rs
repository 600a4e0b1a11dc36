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
        /// The pattern anchored (Java's `matches`), and as written, for
        /// the replacement (Java's `replaceAll`, every match replaced).
        whole: regex::Regex,
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

/// A replacement as Java's `replaceAll` reads it, in the regex crate's
/// syntax: `\\x` is `x`; `$` and digits name a group, taking as many digits
/// as make a group that exists, and a reference to no group is kept as
/// text (as Kafka's `escapeLiteralBackReferences` has it); a `$` with no
/// digit after it is refused (Java throws).
fn java_replacement(java: &str, groups: usize) -> Option<String> {
    let mut out = String::with_capacity(java.len() + 8);
    let literal = |out: &mut String, c: char| match c {
        '$' => out.push_str("$$"),
        c => out.push(c),
    };
    let chars: Vec<char> = java.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                literal(&mut out, *chars.get(i + 1)?);
                i += 2;
            }
            '$' => {
                let digits: String = chars[i + 1..]
                    .iter()
                    .take_while(|c| c.is_ascii_digit())
                    .collect();
                // Java throws on a `$` naming no group (Kafka leaves a
                // pattern without groups alone): refused.
                if digits.is_empty() || groups == 0 {
                    return None;
                }
                // Java: the longest prefix of the digits naming a group
                // (the first digit always counts).
                let mut taken = digits.len();
                while taken > 1 && digits[..taken].parse::<usize>().ok()? > groups {
                    taken -= 1;
                }
                let n: usize = digits[..taken].parse().ok()?;
                match n <= groups {
                    true => {
                        out.push_str(&format!("${{{n}}}"));
                        out.push_str(&digits[taken..]);
                    }
                    false => {
                        out.push_str("$$");
                        out.push_str(&digits);
                    }
                }
                i += 1 + digits.len();
            }
            c => {
                literal(&mut out, c);
                i += 1;
            }
        }
    }
    Some(out)
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
            let case = match flags {
                "" => None,
                "L" => Some(Case::Lower),
                "U" => Some(Case::Upper),
                _ => return Err(invalid()),
            };
            // Whole on its own first, so the anchoring below cannot change
            // what it means (`a)|(b`).
            let unanchored =
                regex::Regex::new(&pattern).map_err(|e| anyhow::anyhow!("{}: {e}", invalid()))?;
            let groups = unanchored.captures_len() - 1;
            let whole = regex::Regex::new(&format!("^(?:{pattern})$"))
                .map_err(|e| anyhow::anyhow!("{}: {e}", invalid()))?;
            let replacement = java_replacement(&replacement, groups).ok_or_else(invalid)?;
            parsed.push(Rule::Map {
                whole,
                pattern: unanchored,
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
                whole,
                pattern,
                replacement,
                case,
            } => {
                if !whole.is_match(dn) {
                    return None;
                }
                // Kafka's `dn.replaceAll(pattern, replacement)`: every
                // match of the pattern as written, the rest kept.
                let name = pattern.replace_all(dn, replacement.as_str()).into_owned();
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

/// A value as Java's `AVA.toRFC2253String` writes it: `,=+<>#;"\` escaped
/// wherever they are, NUL as `\00`, and every leading and trailing space
/// or carriage return escaped.
fn escaped(value: &str) -> String {
    let mut body = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            ',' | '=' | '+' | '<' | '>' | '#' | ';' | '"' | '\\' => {
                body.push('\\');
                body.push(c);
            }
            '\0' => body.push_str("\\00"),
            c => body.push(c),
        }
    }
    let chars: Vec<char> = body.chars().collect();
    let blank = |c: &char| *c == ' ' || *c == '\r';
    let lead = chars.iter().take_while(|c| blank(c)).count();
    let trail = chars.iter().rev().take_while(|c| blank(c)).count();
    let mut out = String::with_capacity(body.len() + 4);
    for (i, c) in chars.iter().enumerate() {
        if i < lead || i >= chars.len() - trail {
            out.push('\\');
        }
        out.push(*c);
    }
    out
}

/// A value as Java reads it into a string (`DerValue.getAsString`), for
/// the string types `AVA.isDerString` writes as text; other types (among
/// them NumericString) are written in hex.
fn as_text(value: &x509_parser::asn1_rs::Any<'_>) -> Option<String> {
    use x509_parser::asn1_rs::Tag;
    let data = value.data;
    match value.tag() {
        Tag::Utf8String => Some(String::from_utf8_lossy(data).into_owned()),
        // US-ASCII, as Java reads them: other bytes are U+FFFD.
        Tag::PrintableString | Tag::Ia5String | Tag::GeneralString => Some(
            data.iter()
                .map(|b| match b.is_ascii() {
                    true => char::from(*b),
                    false => char::REPLACEMENT_CHARACTER,
                })
                .collect(),
        ),
        Tag::TeletexString => Some(data.iter().map(|b| char::from(*b)).collect()),
        Tag::BmpString => {
            let units: Vec<u16> = data
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            let mut text = String::from_utf16_lossy(&units);
            if data.len() % 2 == 1 {
                text.push(char::REPLACEMENT_CHARACTER);
            }
            Some(text)
        }
        _ => None,
    }
}

/// The subject of a DER certificate as Java's `X500Principal.getName()`
/// (RFC 2253) writes it: the most specific RDN first, comma-separated,
/// multi-valued RDNs joined by `+` in their order.
pub fn subject_name(der: &[u8]) -> anyhow::Result<String> {
    let (_, cert) = X509Certificate::from_der(der)
        .map_err(|e| anyhow::anyhow!("the client certificate does not parse: {e}"))?;
    let mut rdns = Vec::new();
    for rdn in cert.subject().iter() {
        let mut avas = Vec::new();
        for attr in rdn.iter() {
            let oid = attr.attr_type().to_id_string();
            let keyword = KEYWORDS.iter().find(|(o, _)| *o == oid).map(|(_, k)| *k);
            let value = attr.attr_value();
            avas.push(match (keyword, as_text(value)) {
                (Some(k), Some(text)) => format!("{k}={}", escaped(&text)),
                _ => {
                    let der = value
                        .to_der_vec()
                        .map_err(|e| anyhow::anyhow!("a subject attribute does not encode: {e}"))?;
                    let mut hex = String::with_capacity(2 * der.len());
                    for b in der {
                        let _ = write!(hex, "{b:02x}");
                    }
                    format!("{}=#{hex}", keyword.map_or(oid, str::to_string))
                }
            });
        }
        rdns.push(avas.join("+"));
    }
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

    /// As Java's `AVA.toRFC2253String`: specials escaped wherever they
    /// are (so `OU=CN=admin` cannot pass for a CN), NUL as `\00`, every
    /// leading and trailing blank.
    #[test]
    fn values_are_escaped_as_java_escapes_them() {
        assert_eq!(escaped("a,b+c"), "a\\,b\\+c");
        assert_eq!(escaped("CN=admin"), "CN\\=admin");
        assert_eq!(escaped("a#b;c<d>e\"x\\"), "a\\#b\\;c\\<d\\>e\\\"x\\\\");
        assert_eq!(escaped("  x \r"), "\\ \\ x\\ \\\r");
        assert_eq!(escaped("a\0b"), "a\\00b");
        assert_eq!(escaped("   "), "\\ \\ \\ ");
    }

    /// Java's replacement syntax: `$n` takes the digits naming a group,
    /// a reference to no group stays text, `\\$` is a dollar.
    #[test]
    fn replacements_read_as_javas() {
        let rule = |r: &str| PrincipalMapper::parse(r).unwrap();
        let dn = "CN=duke,OU=ServiceUsers";
        assert_eq!(
            rule("RULE:^CN=(.*?),OU=(.*)$/$1svc/").name(dn).as_deref(),
            Some("dukesvc")
        );
        assert_eq!(
            rule("RULE:^CN=(.*?),OU=(.*)$/$1_$2/").name(dn).as_deref(),
            Some("duke_ServiceUsers")
        );
        assert_eq!(
            rule("RULE:^CN=(.*?),OU=(.*)$/$12/").name(dn).as_deref(),
            Some("duke2")
        );
        assert_eq!(
            rule("RULE:^CN=(.*?),OU=(.*)$/$3x/").name(dn).as_deref(),
            Some("$3x")
        );
        assert_eq!(
            rule("RULE:^CN=(.*?),OU=(.*)$/\\$1/").name(dn).as_deref(),
            Some("$1")
        );
        assert!(PrincipalMapper::parse("RULE:^CN=(.*)$/$x/").is_err());
        // Java throws on a group reference in a pattern without groups.
        assert!(PrincipalMapper::parse("RULE:^CN=admin$/$1/").is_err());
        // Kafka replaces every match of the pattern as written, keeping the
        // rest (`dn.replaceAll`), once the whole name matched.
        assert_eq!(
            rule("RULE:CN=(.*?)/$1@X/").name("CN=bob,O=x").as_deref(),
            Some("@Xbob,O=x")
        );
        assert_eq!(
            rule("RULE:CN=admin|CN=admin,O=evil/admin/")
                .name("CN=admin,O=evil")
                .as_deref(),
            Some("admin,O=evil")
        );
        // An unbalanced pattern cannot change the anchoring.
        assert!(PrincipalMapper::parse("RULE:a)|(b/x/").is_err());
        // No blank before the flag, as Kafka's parser.
        assert!(PrincipalMapper::parse("RULE:^CN=(.*)$/$1/ L").is_err());
    }
}
