//! What is wrong with the connection, in plain words: the hints for
//! UNAVAILABLE, TLS failures said without the TLS library's names, the
//! check that names a plaintext client talking to a TLS server, and the
//! `wsfs version` and `wsfs doctor` commands built on them.

use super::output::{print_json, println};
use super::{Ctx, Failure, Outcome};
use serde_json::json;
use std::time::Duration;
use wsfs_client::{Client, Error};

/// The runtime `wsfs doctor` asks for to learn which the server has.
const PROBE_RUNTIME: &str = "wsfs-doctor-probe";

/// How long a probe of the server may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// A TLS failure the client can meet, as the TLS library names it.
struct TlsProblem {
    /// Text in the library's message that marks it.
    marks: &'static [&'static str],
    /// What happened, in plain words.
    said: &'static str,
    /// What to do.
    fix: &'static str,
    /// Whether only a server that speaks TLS gives this failure.
    from_tls_server: bool,
}

const TLS_PROBLEMS: &[TlsProblem] = &[
    TlsProblem {
        marks: &["CaUsedAsEndEntity"],
        said: "the server's certificate is marked as a certificate authority, which TLS refuses \
               as a server's own certificate (CaUsedAsEndEntity)",
        fix: "make the certificate with `-addext basicConstraints=critical,CA:FALSE` (`openssl \
              req -x509` marks it as an authority by default) (docs/SECURITY.md, TLS)",
        from_tls_server: true,
    },
    TlsProblem {
        marks: &["UnknownIssuer"],
        said: "the server's certificate is signed by an authority this client does not trust",
        fix: "pass the certificate that signed the server's (the server's own, when \
              self-signed) with --ca FILE or WSFS_CA; without it only the system's authorities \
              are trusted",
        from_tls_server: true,
    },
    TlsProblem {
        marks: &["NotValidForName"],
        said: "the server's certificate does not name the host in the server address",
        fix: "reach the server by a name its certificate holds (its subjectAltName), or issue \
              it a certificate for this name",
        from_tls_server: true,
    },
    TlsProblem {
        marks: &["Expired", "NotValidYet"],
        said: "the server's certificate is outside its validity period",
        fix: "renew the server's certificate (or check this machine's clock)",
        from_tls_server: true,
    },
    TlsProblem {
        marks: &["InvalidContentType", "corrupt message", "InvalidMessage"],
        said: "the server does not speak TLS: it answered in plaintext",
        fix: "use an http:// address for this server (WSFS_SERVER or --server)",
        from_tls_server: false,
    },
    TlsProblem {
        marks: &["invalid peer certificate"],
        said: "the server's certificate was refused",
        fix: "without --ca the system's authorities decide; with --ca (WSFS_CA) it must be the \
              certificate that signed the server's (or the server's own, when self-signed); and \
              it must name the server's host (subjectAltName)",
        from_tls_server: true,
    },
];

fn tls_problem(message: &str) -> Option<&'static TlsProblem> {
    TLS_PROBLEMS
        .iter()
        .find(|p| p.marks.iter().any(|mark| message.contains(mark)))
}

/// A TLS failure's message in plain words (`cannot connect to URL: ...`);
/// any other message as it is.
pub fn plain_tls_message(message: &str) -> String {
    let Some(problem) = tls_problem(message) else {
        return message.to_string();
    };
    let head = message
        .strip_prefix("cannot connect to ")
        .and_then(|rest| rest.split_once(": "))
        .map_or_else(
            || "the TLS handshake failed".to_string(),
            |(url, _)| format!("cannot connect to {url}"),
        );
    // The generic refusal keeps the library's words for the cause.
    let detail = match message.split_once("invalid peer certificate: ") {
        Some((_, cause)) if problem.marks == ["invalid peer certificate"] => format!(" ({cause})"),
        _ => String::new(),
    };
    format!("{head}: {}{detail}", problem.said)
}

/// What to do about an UNAVAILABLE, by what it says: a TLS failure, no
/// server listening, an address that leads nowhere, a proxy with no server
/// behind it, or a running server that lacks something for this call.
pub fn unavailable_hint(message: &str, server: &str) -> Option<String> {
    if let Some(problem) = tls_problem(message) {
        return Some(problem.fix.to_string());
    }
    let connecting = message.starts_with("cannot connect to ");
    Some(if connecting && message.contains("refused") {
        format!(
            "is wsfs-server running at {server}? Start it with `wsfs-server`, or point \
             WSFS_SERVER (or --server) at it"
        )
    } else if connecting {
        format!(
            "{server} cannot be reached: check the address (WSFS_SERVER or --server) and that \
             wsfs-server listens there"
        )
    } else if ["502", "503", "504", "Bad Gateway"]
        .iter()
        .any(|mark| message.contains(mark))
    {
        format!(
            "a proxy at {server} answered, but no wsfs-server behind it did: start the server it \
             sends this session to, or fix its list of servers (docs/DEPLOY.md)"
        )
    } else {
        format!(
            "the server at {server} is running but could not do this now: the message says what \
             it lacks (fix that, then retry)"
        )
    })
}

/// What the transport's own failures say, once connected (a failure to
/// connect says `cannot connect to`, and is explained by its cause).
const TRANSPORT_MARKS: &[&str] = &[
    "transport error",
    "h2 protocol error",
    "operation was canceled",
];

/// Whether a call failed because the connection broke under it rather
/// than because the server refused it.
pub fn connection_broke(error: &Error) -> bool {
    match error {
        // A server's own refusals say what they are about; these are the
        // codes a broken transport comes back as (INTERNAL for a status
        // without a code of its own).
        Error::Cancelled { message }
        | Error::Unavailable { message }
        | Error::Internal { message } => {
            !message.starts_with("cannot connect to ")
                && TRANSPORT_MARKS.iter().any(|m| message.contains(m))
        }
        _ => false,
    }
}

/// A connection that broke under an http:// call is most often a
/// plaintext client talking to a TLS server: asks the server in TLS, and
/// names the mismatch when it answers.
pub async fn explain_broken_connection(server: &str, error: Error) -> Failure {
    if let Some(rest) = server.strip_prefix("http://") {
        let https = format!("https://{rest}");
        if speaks_tls(&https).await {
            return mismatch(server, &https);
        }
    }
    Failure::Remote(error)
}

fn mismatch(server: &str, https: &str) -> Failure {
    Failure::Hinted(
        Error::Unavailable {
            message: format!(
                "the server at {server} speaks TLS, and this client spoke plaintext to it (an \
                 http:// address)"
            ),
        },
        format!(
            "use {https} (WSFS_SERVER or --server), with --ca FILE (WSFS_CA) when its certificate \
             is self-signed or from a private authority"
        ),
    )
}

/// Whether `https_url` completes a TLS handshake, or gets as far as a
/// certificate this client does not trust (which only a TLS server sends).
async fn speaks_tls(https_url: &str) -> bool {
    match tokio::time::timeout(PROBE_TIMEOUT, Client::connect(https_url)).await {
        Ok(Ok(_)) => true,
        Ok(Err(Error::Unavailable { message })) => {
            tls_problem(&message).is_some_and(|p| p.from_tls_server)
        }
        _ => false,
    }
}

/// `wsfs version`: this client's version, and the server's reachability.
pub async fn version(ctx: &mut Ctx) -> Outcome {
    let client_version = env!("CARGO_PKG_VERSION");
    let reached = probe(ctx).await;
    let server_version = match &reached {
        Ok(client) => server_version(client).await,
        Err(_) => None,
    };
    let server = match &reached {
        Ok(_) => format!("reachable ({})", reported(&server_version)),
        Err(f) => format!("not reachable: {}", f.text().1),
    };
    if ctx.json {
        return print_json(&json!({
            "client": client_version,
            "server": {
                "address": ctx.server,
                "reachable": reached.is_ok(),
                "version": server_version,
            },
        }));
    }
    println(&format!("wsfs {client_version}"))?;
    println(&format!("server {}: {server}", ctx.server))
}

/// The version the server reports, if it reports one.
async fn server_version(client: &Client) -> Option<String> {
    client.server_version().await.ok().flatten()
}

/// The server's version in words.
fn reported(version: &Option<String>) -> String {
    match version {
        Some(v) => format!("wsfs-server {v}"),
        None => "its version is not reported".to_string(),
    }
}

/// Connects and makes one call that every server answers (a GetSession of
/// no session): Ok when the server answered at all, refusal included.
async fn probe(ctx: &mut Ctx) -> Outcome<Client> {
    let connect = async {
        let client = ctx.client().await?;
        match client.token_session().await {
            Ok(_) => Ok(client),
            Err(e) if connection_broke(&e) => Err(explain_broken_connection(&ctx.server, e).await),
            Err(e @ Error::Unavailable { .. }) => Err(e.into()),
            Err(_) => Ok(client),
        }
    };
    match tokio::time::timeout(PROBE_TIMEOUT, connect).await {
        Ok(done) => done,
        Err(_) => Err(Failure::Remote(Error::Unavailable {
            message: format!(
                "{} did not answer within {}s",
                ctx.server,
                PROBE_TIMEOUT.as_secs()
            ),
        })),
    }
}

/// One line of the doctor's report.
struct Check {
    name: &'static str,
    ok: bool,
    said: String,
    fix: Option<String>,
}

/// `wsfs doctor`: whether the server answers, how (TLS or plaintext),
/// what it enables, whether the token works, and what to fix.
pub async fn doctor(ctx: &mut Ctx) -> Outcome {
    let mut checks = Vec::new();
    let tls = ctx.server.starts_with("https://");
    checks.push(Check {
        name: "client",
        ok: true,
        said: format!("wsfs {}", env!("CARGO_PKG_VERSION")),
        fix: None,
    });
    let reached = probe(ctx).await;
    match &reached {
        Ok(client) => checks.push(Check {
            name: "server",
            ok: true,
            said: format!(
                "{} answers, over {} ({})",
                ctx.server,
                if tls { "TLS" } else { "plaintext" },
                reported(&server_version(client).await)
            ),
            fix: None,
        }),
        Err(failure) => {
            let (said, fix) = match failure {
                Failure::Hinted(e, fix) => (super::remote_message(e), Some(fix.clone())),
                Failure::Remote(e) => (super::remote_message(e), super::hint(e, &ctx.reach())),
                other => (other.text().1, None),
            };
            checks.push(Check {
                name: "server",
                ok: false,
                said,
                fix,
            });
        }
    }
    if let Ok(client) = reached {
        features(ctx, &client, &mut checks).await;
    }
    let healthy = checks.iter().all(|c| c.ok);
    if ctx.json {
        let all: Vec<_> = checks
            .iter()
            .map(|c| json!({"check": c.name, "ok": c.ok, "said": c.said, "fix": c.fix}))
            .collect();
        print_json(&json!({"ok": healthy, "checks": all}))?;
    } else {
        for c in &checks {
            let mark = if c.ok { "ok  " } else { "FAIL" };
            println(&format!("{mark} {:<12} {}", c.name, c.said))?;
            if let Some(fix) = &c.fix {
                println(&format!("     {:<12} fix: {fix}", ""))?;
            }
        }
    }
    if healthy {
        Ok(())
    } else {
        Err(Failure::Silent(1))
    }
}

/// What the server enables, and whether the token works, asked of the
/// server with calls that change nothing.
async fn features(ctx: &Ctx, client: &Client, checks: &mut Vec<Check>) {
    // A client without the token: does the server ask for one?
    let tokens_on = match ctx.connect().await {
        Ok(bare) => matches!(
            bare.list_sessions_labelled(&Default::default(), false)
                .await,
            Err(Error::Unauthenticated { .. })
        ),
        Err(_) => false,
    };
    checks.push(Check {
        name: "tokens",
        ok: true,
        said: if tokens_on {
            "on: every call needs a token (the server runs with --admin-token)".into()
        } else {
            "off: no token needed (the server runs without --admin-token, on loopback only)".into()
        },
        fix: None,
    });
    let mut admin = !tokens_on;
    match (&ctx.token, tokens_on) {
        (None, true) => checks.push(Check {
            name: "token",
            ok: false,
            said: "none given, and this server needs one".into(),
            fix: Some(
                "set WSFS_TOKEN (or pass --token): the admin token to manage sessions, a \
                 session's token for its files"
                    .into(),
            ),
        }),
        (None, false) => {}
        (Some(_), _) => match client.token_session().await {
            Ok(info) => checks.push(Check {
                name: "token",
                ok: true,
                said: format!("valid: a token of session {}", info.id),
                fix: None,
            }),
            Err(Error::InvalidArgument { .. }) => {
                admin = true;
                checks.push(Check {
                    name: "token",
                    ok: true,
                    said: if tokens_on {
                        "valid: the admin token".into()
                    } else {
                        "sent, but this server has tokens off and ignores it".into()
                    },
                    fix: None,
                })
            }
            Err(e) => checks.push(Check {
                name: "token",
                ok: false,
                said: format!("refused: {e}"),
                fix: Some(
                    "check WSFS_TOKEN (or --token): the admin token is the server's \
                     --admin-token; a session's comes from `wsfs session create` or \
                     `wsfs token issue`"
                        .into(),
                ),
            }),
        },
    }
    if !admin {
        return;
    }
    // Recovering a session that cannot exist changes nothing, and says
    // whether the server has an object store.
    let nobody = "00000000-0000-4000-8000-000000000000";
    let store = client.recover_session(nobody, None, false).await;
    let has_store = !matches!(&store, Err(Error::FailedPrecondition { message }) if message.contains("object store"));
    // A runtime no operator names: refused, saying which runtimes there
    // are (or that there are none), before anything is started.
    let probe = wsfs_client::SessionOptions::container(PROBE_RUNTIME, "wsfs-doctor", "/");
    let runtimes = match client.create_session(probe).await {
        Err(Error::FailedPrecondition { message }) if message.contains("container runtime") => {
            "none (no --container-runtime: no CONTAINER sessions)".to_string()
        }
        Err(Error::InvalidArgument { message }) if message.contains("this server has:") => {
            let names = message
                .rsplit("this server has:")
                .next()
                .unwrap_or("")
                .trim();
            format!("{names} (CONTAINER sessions through them)")
        }
        Ok(info) => {
            let _ = client.delete_session(&info.id).await;
            format!("'{PROBE_RUNTIME}' and maybe more")
        }
        Err(e) => format!("unknown ({e})"),
    };
    checks.push(Check {
        name: "containers",
        ok: true,
        said: runtimes,
        fix: None,
    });
    checks.push(Check {
        name: "object store",
        ok: true,
        said: if has_store {
            "on: snapshots are kept in it, sessions can be recovered".into()
        } else {
            "off: no --object-store (snapshots stay on this server; no `session recover`)".into()
        },
        fix: None,
    });
}
