//! `floe users list|set|delete`: users' SCRAM credentials, as
//! `kafka-configs.sh --entity-type users` manages them. The password is
//! salted here (PBKDF2, a fresh random salt), so it never leaves this
//! process: the broker gets the salt and the salted password, as from
//! Kafka's admin client.

use anyhow::{Context, bail};
use floe_metastore::scram::{MIN_ITERATIONS, ScramMechanism};
use floe_protocol::kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use floe_protocol::kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use floe_protocol::kafka_protocol::messages::*;

use super::{Broker, Output, Table, check, print, str_bytes};

#[derive(clap::Subcommand)]
pub enum UsersCommand {
    /// Users with SCRAM credentials, their mechanisms and iteration counts.
    List { users: Vec<String> },
    /// Set a user's SCRAM password for one mechanism: from FLOE_USER_PASSWORD,
    /// else the first line of standard input.
    Set {
        user: String,
        #[arg(long, default_value = "SCRAM-SHA-512", value_parser = ["SCRAM-SHA-256", "SCRAM-SHA-512"])]
        mechanism: String,
        /// PBKDF2 iterations (4096 to 16384, as Kafka accepts).
        #[arg(long, default_value_t = MIN_ITERATIONS)]
        iterations: i32,
    },
    /// Delete a user's credential for one mechanism.
    Delete {
        user: String,
        #[arg(long, value_parser = ["SCRAM-SHA-256", "SCRAM-SHA-512"])]
        mechanism: String,
    },
}

pub async fn run(
    bootstrap: &str,
    security: &floe_protocol::client::Security,
    output: Output,
    command: UsersCommand,
) -> anyhow::Result<()> {
    let mut broker = Broker::connect(bootstrap, security).await?;
    match command {
        UsersCommand::List { users } => {
            let names = (!users.is_empty()).then(|| {
                users
                    .iter()
                    .map(|u| UserName::default().with_name(str_bytes(u)))
                    .collect()
            });
            let response: DescribeUserScramCredentialsResponse = broker
                .call(
                    ApiKey::DescribeUserScramCredentials,
                    0,
                    &DescribeUserScramCredentialsRequest::default().with_users(names),
                )
                .await?;
            check(
                response.error_code,
                "describing users",
                response.error_message.as_ref(),
            )?;
            let mut table = Table::new(&["USER", "MECHANISM", "ITERATIONS"]);
            for result in &response.results {
                check(
                    result.error_code,
                    &result.user,
                    result.error_message.as_ref(),
                )?;
                for info in &result.credential_infos {
                    let mechanism = ScramMechanism::from_type(info.mechanism).map_or_else(
                        || format!("unknown ({})", info.mechanism),
                        |m| m.name().into(),
                    );
                    table.push(vec![
                        result.user.as_str().into(),
                        mechanism.into(),
                        info.iterations.into(),
                    ]);
                }
            }
            print(output, &[("users", &table)]);
        }
        UsersCommand::Set {
            user,
            mechanism,
            iterations,
        } => {
            let m = ScramMechanism::from_name(&mechanism).context("unknown mechanism")?;
            let password = password()?;
            let salt = floe_agent::security::scram::random_bytes(32);
            let salted = floe_agent::security::scram::salted_password(
                m,
                password.as_bytes(),
                &salt,
                u32::try_from(iterations).context("iterations must be positive")?,
            );
            let request = AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                ScramCredentialUpsertion::default()
                    .with_name(str_bytes(&user))
                    .with_mechanism(m.as_type())
                    .with_iterations(iterations)
                    .with_salt(salt.into())
                    .with_salted_password(salted.into()),
            ]);
            alter(&mut broker, &request, &user).await?;
            eprintln!("set {mechanism} credential of {user}");
        }
        UsersCommand::Delete { user, mechanism } => {
            let m = ScramMechanism::from_name(&mechanism).context("unknown mechanism")?;
            let request = AlterUserScramCredentialsRequest::default().with_deletions(vec![
                ScramCredentialDeletion::default()
                    .with_name(str_bytes(&user))
                    .with_mechanism(m.as_type()),
            ]);
            alter(&mut broker, &request, &user).await?;
            eprintln!("deleted {mechanism} credential of {user}");
        }
    }
    Ok(())
}

async fn alter(
    broker: &mut Broker,
    request: &AlterUserScramCredentialsRequest,
    user: &str,
) -> anyhow::Result<()> {
    let response: AlterUserScramCredentialsResponse = broker
        .call(ApiKey::AlterUserScramCredentials, 0, request)
        .await?;
    let Some(result) = response.results.first() else {
        bail!("the broker answered nothing for {user}");
    };
    check(result.error_code, user, result.error_message.as_ref())
}

/// FLOE_USER_PASSWORD, else the first line of standard input.
fn password() -> anyhow::Result<String> {
    if let Ok(password) = std::env::var("FLOE_USER_PASSWORD") {
        return Ok(password);
    }
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .context("reading the password from standard input")?;
    let password = line.trim_end_matches(['\n', '\r']).to_string();
    if password.is_empty() {
        bail!("no password: set FLOE_USER_PASSWORD or give it on standard input");
    }
    Ok(password)
}
