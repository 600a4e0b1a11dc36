//! One config as DescribeConfigs describes it: value, source, type,
//! documentation and synonyms, with Kafka's numbers for each.

use floe_protocol::kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsSynonym,
};

use floe_protocol::str_bytes;

/// Kafka's `ConfigSource` numbers.
pub mod source {
    pub const DYNAMIC_TOPIC: i8 = 1;
    pub const DYNAMIC_DEFAULT_BROKER: i8 = 3;
    pub const STATIC_BROKER: i8 = 4;
    pub const DEFAULT: i8 = 5;
    pub const GROUP: i8 = 8;
    pub const CLIENT_METRICS: i8 = 7;
}

/// Kafka's `ConfigType` numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Boolean = 1,
    String = 2,
    Int = 3,
    Long = 5,
    Double = 6,
    List = 7,
    Password = 9,
}

/// Where a value comes from: the name it is set under, the value, the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synonym {
    pub name: String,
    pub value: Option<String>,
    pub source: i8,
}

impl Synonym {
    pub fn new(name: &str, value: Option<String>, source: i8) -> Self {
        Synonym {
            name: name.to_string(),
            value,
            source,
        }
    }
}

/// One described config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub kind: Type,
    pub read_only: bool,
    pub doc: &'static str,
    /// Every place a value is set, most specific first (Kafka's order:
    /// dynamic, dynamic default, static, default). The first one is the
    /// entry's value and source; none at all is a default of null.
    pub synonyms: Vec<Synonym>,
}

impl Entry {
    /// An entry that can be altered, with where its value comes from.
    pub fn alterable(name: &str, kind: Type, doc: &'static str, synonyms: Vec<Synonym>) -> Entry {
        Entry {
            name: name.to_string(),
            kind,
            read_only: false,
            doc,
            synonyms,
        }
    }

    pub fn source(&self) -> i8 {
        self.synonyms.first().map_or(source::DEFAULT, |s| s.source)
    }

    pub fn value(&self) -> Option<&str> {
        self.synonyms.first().and_then(|s| s.value.as_deref())
    }

    /// The wire entry; synonyms and documentation only when asked for.
    /// A password's value is never shown, nor are its synonyms'.
    pub fn to_wire(&self, synonyms: bool, documentation: bool) -> DescribeConfigsResourceResult {
        let sensitive = self.kind == Type::Password;
        let shown = |v: Option<&str>| v.filter(|_| !sensitive).map(str_bytes);
        DescribeConfigsResourceResult::default()
            .with_name(str_bytes(&self.name))
            .with_value(shown(self.value()))
            .with_read_only(self.read_only)
            .with_config_source(self.source())
            .with_is_sensitive(sensitive)
            .with_config_type(self.kind as i8)
            .with_documentation(documentation.then(|| str_bytes(self.doc)))
            .with_synonyms(match synonyms {
                true => self
                    .synonyms
                    .iter()
                    .map(|s| {
                        DescribeConfigsSynonym::default()
                            .with_name(str_bytes(&s.name))
                            .with_value(shown(s.value.as_deref()))
                            .with_source(s.source)
                    })
                    .collect(),
                false => Vec::new(),
            })
    }
}
