//! Every user's SCRAM credentials, as Kafka's `ScramControlManager` keeps
//! them (a part of the state; the rules of an alteration are the contract's).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::contract::scram::*;

/// Every user's credentials, by mechanism.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredentials {
    users: BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>>,
}

impl ScramCredentials {
    pub fn get(&self, user: &str, mechanism: ScramMechanism) -> Option<&ScramCredential> {
        self.users.get(user)?.get(&mechanism)
    }

    /// Users and their mechanisms with iteration counts: all of them, or
    /// those named (`None` for a named user without credentials).
    pub fn describe(&self, users: Option<&[String]>) -> Vec<UserMechanisms> {
        let of = |by: &BTreeMap<ScramMechanism, ScramCredential>| {
            by.iter().map(|(m, c)| (*m, c.iterations)).collect()
        };
        match users {
            None => self
                .users
                .iter()
                .map(|(user, by)| (user.clone(), Some(of(by))))
                .collect(),
            Some(names) => names
                .iter()
                .map(|user| (user.clone(), self.users.get(user).map(of)))
                .collect(),
        }
    }

    /// Applies what is valid of `alterations`; each user's outcome, in the
    /// order users first appear.
    pub fn alter(
        &mut self,
        alterations: Vec<ScramAlteration>,
    ) -> Vec<(String, Result<(), ScramRefusal>)> {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for a in &alterations {
            *seen.entry(a.user().to_string()).or_default() += 1;
        }
        let mut outcomes: Vec<(String, Result<(), ScramRefusal>)> = Vec::new();
        for a in alterations {
            let user = a.user().to_string();
            match seen.get(&user) {
                // Answered already (a duplicate, once).
                None => continue,
                Some(n) if *n > 1 => {
                    seen.remove(&user);
                    outcomes.push((user, Err(ScramRefusal::AlteredTwice)));
                    continue;
                }
                Some(_) => {}
            }
            let outcome = self.alter_one(a);
            outcomes.push((user, outcome));
        }
        outcomes
    }

    fn alter_one(&mut self, alteration: ScramAlteration) -> Result<(), ScramRefusal> {
        check(&alteration)?;
        match alteration {
            ScramAlteration::Delete { user, mechanism } => {
                let mechanism =
                    ScramMechanism::from_type(mechanism).ok_or(ScramRefusal::UnknownMechanism)?;
                let by = self.users.get_mut(&user).ok_or(ScramRefusal::NotFound)?;
                by.remove(&mechanism).ok_or(ScramRefusal::NotFound)?;
                if by.is_empty() {
                    self.users.remove(&user);
                }
                Ok(())
            }
            ScramAlteration::Upsert {
                user,
                mechanism,
                credential,
            } => {
                let mechanism =
                    ScramMechanism::from_type(mechanism).ok_or(ScramRefusal::UnknownMechanism)?;
                if !self.users.contains_key(&user) && self.users.len() >= MAX_USERS {
                    return Err(ScramRefusal::TooManyUsers);
                }
                self.users
                    .entry(user)
                    .or_default()
                    .insert(mechanism, credential);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(iterations: i32) -> ScramCredential {
        ScramCredential {
            salt: vec![1; 16],
            stored_key: vec![2; 32],
            server_key: vec![3; 32],
            iterations,
        }
    }

    fn upsert(user: &str, mechanism: i8, iterations: i32) -> ScramAlteration {
        ScramAlteration::Upsert {
            user: user.into(),
            mechanism,
            credential: cred(iterations),
        }
    }

    fn delete(user: &str, mechanism: i8) -> ScramAlteration {
        ScramAlteration::Delete {
            user: user.into(),
            mechanism,
        }
    }

    #[test]
    fn alterations_follow_kafkas_rules() {
        let mut s = ScramCredentials::default();
        let out = s.alter(vec![
            upsert("alice", 1, 4096),
            upsert("bob", 1, 8192),
            upsert("bob", 2, 8192),
            upsert("", 1, 4096),
            upsert("carol", 3, 4096),
            upsert("dave", 1, 4095),
            upsert("erin", 2, 16385),
            delete("frank", 1),
        ]);
        assert_eq!(
            out,
            vec![
                ("alice".into(), Ok(())),
                ("bob".into(), Err(ScramRefusal::AlteredTwice)),
                (
                    "".into(),
                    Err(ScramRefusal::Unacceptable(
                        "Username must not be empty".into()
                    ))
                ),
                ("carol".into(), Err(ScramRefusal::UnknownMechanism)),
                (
                    "dave".into(),
                    Err(ScramRefusal::Unacceptable("Too few iterations".into()))
                ),
                (
                    "erin".into(),
                    Err(ScramRefusal::Unacceptable("Too many iterations".into()))
                ),
                ("frank".into(), Err(ScramRefusal::NotFound)),
            ]
        );
        assert_eq!(s.get("alice", ScramMechanism::Sha256), Some(&cred(4096)));
        assert!(
            s.get("bob", ScramMechanism::Sha256).is_none(),
            "nothing of a refused user"
        );
        assert_eq!(
            s.describe(None),
            vec![("alice".into(), Some(vec![(ScramMechanism::Sha256, 4096)]))]
        );
        assert_eq!(
            s.describe(Some(&["nobody".into()])),
            vec![("nobody".into(), None)]
        );

        // Another mechanism for alice, then both deleted one at a time.
        assert_eq!(
            s.alter(vec![upsert("alice", 2, 8192)]),
            vec![("alice".into(), Ok(()))]
        );
        assert_eq!(
            s.alter(vec![delete("alice", 1)]),
            vec![("alice".into(), Ok(()))]
        );
        assert!(s.get("alice", ScramMechanism::Sha256).is_none());
        assert_eq!(
            s.alter(vec![delete("alice", 1)]),
            vec![("alice".into(), Err(ScramRefusal::NotFound))]
        );
        assert_eq!(
            s.alter(vec![delete("alice", 2)]),
            vec![("alice".into(), Ok(()))]
        );
        assert!(s.describe(None).is_empty());
    }
}
