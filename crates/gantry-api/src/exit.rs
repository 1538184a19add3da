//! The CLI's exit codes: a script that runs `gantry` can tell a controller that is down from a
//! job id that does not exist, a token that is not allowed, and a file that is wrong, without
//! reading stderr. One table, here and in docs/cli.md.

use crate::connection::CallError;
use gantry_wire::client::ClientError;

/// Done as asked.
pub const OK: u8 = 0;
/// What was asked about failed: a job `--wait`ed for did not complete, or `validate` found a
/// job the fleet can never run.
pub const FAILED: u8 = 1;
/// Usage or input: a flag or argument the command refuses (clap's own code), a file that does
/// not read or is not valid, a request the controller read and refused (HTTP 400, 409, 413,
/// 429), and any error not listed below.
pub const USAGE: u8 = 2;
/// The controller could not be reached: connection refused, no answer in time, TLS failed,
/// only standbys answered.
pub const UNREACHABLE: u8 = 3;
/// Not authenticated (HTTP 401: no token, or an unknown one) or not allowed (HTTP 403).
pub const DENIED: u8 = 4;
/// Not found (HTTP 404): no such job, node or token.
pub const NOT_FOUND: u8 = 5;

/// The exit code for an error, from the first cause in `chain` that says which.
pub fn code<'a>(chain: impl Iterator<Item = &'a (dyn std::error::Error + 'static)>) -> u8 {
    for cause in chain {
        if let Some(call) = cause.downcast_ref::<CallError>() {
            return of_call(call);
        }
        if let Some(client) = cause.downcast_ref::<ClientError>() {
            return of_client(client);
        }
    }
    USAGE
}

fn of_call(error: &CallError) -> u8 {
    match error {
        CallError::Client(client) => of_client(client),
        CallError::Unauthorized { .. } => DENIED,
        CallError::Refused { status: 401 | 403, .. } => DENIED,
        CallError::Refused { status: 404, .. } => NOT_FOUND,
        CallError::Refused { .. } | CallError::Profile(_) => USAGE,
    }
}

fn of_client(error: &ClientError) -> u8 {
    match error {
        ClientError::Unreachable { .. }
        | ClientError::NoAnswer { .. }
        | ClientError::Standby { .. }
        | ClientError::Tls { .. }
        | ClientError::Io(_) => UNREACHABLE,
        _ => USAGE,
    }
}

/// Output cut short by a closed pipe (`gantry sim ... | head`) ends the program quietly, as
/// other command-line tools do: `println!` panics on a broken pipe, and this hook turns that
/// one panic into a clean exit (without unsafe code to restore SIGPIPE).
pub fn quiet_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message =
            payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied());
        if message.is_some_and(|m| m.contains("Broken pipe")) {
            std::process::exit(0);
        }
        default(info);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code_of(error: anyhow::Error) -> u8 {
        code(error.chain())
    }

    #[test]
    fn each_kind_of_failure_has_its_code() {
        let refused = |status| anyhow::Error::new(CallError::Refused { status, message: "x".into() });
        assert_eq!(code_of(refused(404).context("job 9")), NOT_FOUND);
        assert_eq!(code_of(refused(403)), DENIED);
        assert_eq!(code_of(refused(400)), USAGE);
        assert_eq!(code_of(refused(429)), USAGE);
        let unauthorized = CallError::Unauthorized { message: "no token".into(), token_from: "x".into() };
        assert_eq!(code_of(anyhow::Error::new(unauthorized)), DENIED);
        let down = ClientError::Unreachable { server: "https://x".into(), detail: "refused".into() };
        assert_eq!(code_of(anyhow::Error::new(CallError::from(down)).context("--wrap")), UNREACHABLE);
        assert_eq!(code_of(anyhow::anyhow!("cannot read jobs.toml")), USAGE);
    }
}
