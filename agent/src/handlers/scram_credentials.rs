//! DescribeUserScramCredentials and AlterUserScramCredentials: users' SCRAM
//! credentials, kept in the metastore (see `floe_metastore::scram`).
//!
//! An admin client sends a salt and the salted password (never the
//! password); the agent derives the stored and server keys, as Kafka's
//! controller does, and the metastore keeps those. Describing shows
//! mechanisms and iteration counts only.

use std::collections::{BTreeMap, BTreeSet};

use floe_metastore::scram::{
    MAX_ALTERATIONS, MAX_KEY_BYTES, ScramAlteration, ScramMechanism, ScramRefusal, check,
};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use floe_protocol::kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use floe_protocol::kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};

use crate::broker::{Broker, kafka_error};
use floe_protocol::str_bytes;

pub async fn describe(
    broker: &Broker,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let asked: Option<Vec<String>> = req
        .users
        .filter(|u| !u.is_empty())
        .map(|users| users.into_iter().map(|u| u.name.to_string()).collect());
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for user in asked.iter().flatten() {
        *counts.entry(user).or_default() += 1;
    }
    // Each user once, duplicates answered on their own (as Kafka does).
    let mut unique: Vec<String> = Vec::new();
    let mut duplicates: Vec<String> = Vec::new();
    for (user, n) in &counts {
        match n {
            1 => unique.push(user.to_string()),
            _ => duplicates.push(user.to_string()),
        }
    }
    let query = asked.as_ref().map(|_| unique);
    let described = match broker.meta.describe_scram_credentials(query).await {
        Ok(described) => described,
        Err(e) => {
            return DescribeUserScramCredentialsResponse::default()
                .with_error_code(kafka_error(&e).code())
                .with_error_message(Some(str_bytes(&e.to_string())));
        }
    };
    let mut results: Vec<DescribeUserScramCredentialsResult> = described
        .into_iter()
        .map(|(user, credentials)| {
            let result = DescribeUserScramCredentialsResult::default().with_user(str_bytes(&user));
            match credentials {
                Some(credentials) => result.with_credential_infos(
                    credentials
                        .into_iter()
                        .map(|(m, iterations)| {
                            CredentialInfo::default()
                                .with_mechanism(m.as_type())
                                .with_iterations(iterations)
                        })
                        .collect(),
                ),
                None => result
                    .with_error_code(ResponseError::ResourceNotFound.code())
                    .with_error_message(Some(str_bytes(&format!(
                        "Attempt to describe a user credential that does not exist: {user}"
                    )))),
            }
        })
        .collect();
    results.extend(duplicates.into_iter().map(|user| {
        DescribeUserScramCredentialsResult::default()
            .with_user(str_bytes(&user))
            .with_error_code(ResponseError::DuplicateResource.code())
            .with_error_message(Some(str_bytes(&format!(
                "Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
            ))))
    }));
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

pub async fn alter(
    broker: &Broker,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let result = |user: &str, outcome: Result<(), ScramRefusal>| {
        let result = AlterUserScramCredentialsResult::default().with_user(str_bytes(user));
        match outcome {
            Ok(()) => result,
            Err(refusal) => {
                let (error, message) = refused(&refusal);
                result
                    .with_error_code(error.code())
                    .with_error_message(Some(str_bytes(&message)))
            }
        }
    };
    let count = req.deletions.len() + req.upsertions.len();
    if count > MAX_ALTERATIONS {
        let users: BTreeSet<String> = req
            .deletions
            .iter()
            .map(|d| d.name.to_string())
            .chain(req.upsertions.iter().map(|u| u.name.to_string()))
            .collect();
        let why = format!("more than {MAX_ALTERATIONS} alterations in one request");
        return AlterUserScramCredentialsResponse::default().with_results(
            users
                .iter()
                .map(|u| result(u, Err(ScramRefusal::Unacceptable(why.clone()))))
                .collect(),
        );
    }
    let mut alterations = Vec::with_capacity(count);
    for d in req.deletions {
        alterations.push(ScramAlteration::Delete {
            user: d.name.to_string(),
            mechanism: d.mechanism,
        });
    }
    for u in req.upsertions {
        // A salted password is a digest's length: a longer one is refused
        // (as keys of no bytes) before it costs an HMAC.
        let m = ScramMechanism::from_type(u.mechanism).unwrap_or(ScramMechanism::Sha256);
        let credential = match u.salted_password.len() {
            1..=MAX_KEY_BYTES => crate::security::scram::credential(
                m,
                u.salt.to_vec(),
                &u.salted_password,
                u.iterations,
            ),
            _ => floe_metastore::scram::ScramCredential {
                salt: u.salt.to_vec(),
                stored_key: Vec::new(),
                server_key: Vec::new(),
                iterations: u.iterations,
            },
        };
        alterations.push(ScramAlteration::Upsert {
            user: u.name.to_string(),
            mechanism: u.mechanism,
            credential,
        });
    }
    // Kafka's checks that need no state are made here, so only what may
    // apply reaches the log; the metastore makes them again, and the rest.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for a in &alterations {
        *seen.entry(a.user().to_string()).or_default() += 1;
    }
    let mut answered = Vec::new();
    let mut proposed = Vec::new();
    let mut twice = BTreeSet::new();
    for a in alterations {
        let user = a.user().to_string();
        if seen[&user] > 1 {
            if twice.insert(user.clone()) {
                answered.push(result(&user, Err(ScramRefusal::AlteredTwice)));
            }
            continue;
        }
        match check(&a) {
            Ok(()) => proposed.push(a),
            Err(refusal) => answered.push(result(&user, Err(refusal))),
        }
    }
    if proposed.is_empty() {
        return AlterUserScramCredentialsResponse::default().with_results(answered);
    }
    let users: Vec<String> = proposed.iter().map(|a| a.user().to_string()).collect();
    match broker.meta.alter_scram_credentials(proposed).await {
        Ok(outcomes) => {
            for (user, outcome) in outcomes {
                if outcome.is_ok() {
                    tracing::info!(user, "SCRAM credentials altered");
                }
                answered.push(result(&user, outcome));
            }
        }
        // Not known to have applied: each user gets the error.
        Err(e) => answered.extend(users.iter().map(|user| {
            AlterUserScramCredentialsResult::default()
                .with_user(str_bytes(user))
                .with_error_code(kafka_error(&e).code())
                .with_error_message(Some(str_bytes(&e.to_string())))
        })),
    }
    AlterUserScramCredentialsResponse::default().with_results(answered)
}

/// Kafka's error and message for a refused alteration.
fn refused(refusal: &ScramRefusal) -> (ResponseError, String) {
    match refusal {
        ScramRefusal::AlteredTwice => (
            ResponseError::DuplicateResource,
            "A user credential cannot be altered twice in the same request".into(),
        ),
        ScramRefusal::Unacceptable(why) => (ResponseError::UnacceptableCredential, why.clone()),
        ScramRefusal::UnknownMechanism => (
            ResponseError::UnsupportedSaslMechanism,
            "Unknown SCRAM mechanism".into(),
        ),
        ScramRefusal::NotFound => (
            ResponseError::ResourceNotFound,
            "Attempt to delete a user credential that does not exist".into(),
        ),
        ScramRefusal::TooManyUsers => (
            ResponseError::UnacceptableCredential,
            format!(
                "More than {} users have SCRAM credentials",
                floe_metastore::scram::MAX_USERS
            ),
        ),
    }
}
