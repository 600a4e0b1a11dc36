//! DescribeUserScramCredentials and AlterUserScramCredentials: users' SCRAM
//! credentials, kept in the metastore (see `floe_metastore::scram`).
//!
//! An admin client sends a salt and the salted password (never the
//! password); the agent derives the stored and server keys, as Kafka's
//! controller does, and the metastore keeps those. Describing shows
//! mechanisms and iteration counts only.

use std::collections::BTreeMap;

use floe_metastore::scram::{ScramAlteration, ScramMechanism, ScramRefusal};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use floe_protocol::kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use floe_protocol::kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};

use super::str_bytes;
use crate::broker::{Broker, kafka_error};

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
    let mut alterations = Vec::with_capacity(req.deletions.len() + req.upsertions.len());
    for d in req.deletions {
        alterations.push(ScramAlteration::Delete {
            user: d.name.to_string(),
            mechanism: d.mechanism,
        });
    }
    for u in req.upsertions {
        // The keys are derived here; the metastore checks the rest. An
        // unknown mechanism is refused there, so any digest serves here.
        let m = ScramMechanism::from_type(u.mechanism).unwrap_or(ScramMechanism::Sha256);
        alterations.push(ScramAlteration::Upsert {
            user: u.name.to_string(),
            mechanism: u.mechanism,
            credential: crate::scram::credential(
                m,
                u.salt.to_vec(),
                &u.salted_password,
                u.iterations,
            ),
        });
    }
    let users: Vec<String> = alterations.iter().map(|a| a.user().to_string()).collect();
    let results = match broker.meta.alter_scram_credentials(alterations).await {
        Ok(outcomes) => outcomes
            .into_iter()
            .map(|(user, outcome)| {
                let result = AlterUserScramCredentialsResult::default().with_user(str_bytes(&user));
                match outcome {
                    Ok(()) => {
                        tracing::info!(user, "SCRAM credentials altered");
                        result
                    }
                    Err(refusal) => {
                        let (error, message) = refused(&refusal);
                        result
                            .with_error_code(error.code())
                            .with_error_message(Some(str_bytes(&message)))
                    }
                }
            })
            .collect(),
        // Not known to have applied: each user gets the error.
        Err(e) => {
            let mut seen = std::collections::BTreeSet::new();
            users
                .into_iter()
                .filter(|u| seen.insert(u.clone()))
                .map(|user| {
                    AlterUserScramCredentialsResult::default()
                        .with_user(str_bytes(&user))
                        .with_error_code(kafka_error(&e).code())
                        .with_error_message(Some(str_bytes(&e.to_string())))
                })
                .collect()
        }
    };
    AlterUserScramCredentialsResponse::default().with_results(results)
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
