//! The `wsfs` command line.
//!
//! - [`Cli`] is the whole grammar (clap derive); each subcommand's
//!   `--help` ends with an example.
//! - [`Ctx`] is what every command gets: the connection, the session id,
//!   the token, and how to print (`--json` or text).
//! - [`Failure`] is how a command fails; [`main`] turns it into the exit
//!   code (1 for a failed operation, 2 for a usage error) and one line on
//!   stderr, `wsfs: REASON: message`.
//!
//! Commands live by topic: `files` (read, write, list...), `search` (grep,
//! glob, watch), `sessions` (sessions, snapshots, archives, tokens), `sync`
//! (push and pull), `doctor` (connection checks, TLS in plain words,
//! version), `mount` (the FUSE mount), `output` (JSON, times, sizes,
//! progress bars). Every
//! command is a plain user of the typed client: nothing here builds a
//! request by hand.

mod args;
mod context;
mod doctor;
mod files;
mod mcp;
mod mount;
mod output;
mod search;
mod sessions;
mod sync;
mod unpack;

use args::{Cli, Command};
use clap::Parser;
use std::io::Write;
use std::process::ExitCode;
use wsfs_client::{Client, Error, Session};

/// How a command fails.
#[derive(Debug)]
pub enum Failure {
    /// The server (or the client's own checks) refused: exit 1, with the
    /// contract reason.
    Remote(Error),
    /// Something on this machine failed (a local file, stdout): exit 1.
    Local(String),
    /// The command line does not make sense: exit 2.
    Usage(String),
    /// Nothing to print, exit with this code (grep that matched nothing).
    Silent(u8),
    /// Another failure, reported as usual but exiting with this code (grep
    /// exits 2 on errors, as grep and rg do, so 1 keeps meaning "no match").
    Code(u8, Box<Failure>),
    /// A refusal, with what to do in this command's own words rather than
    /// the reason's usual hint: exit 1.
    Hinted(Error, String),
    /// A refusal told in one line of this command's own (what happened and
    /// what to do), in place of the server's sentence and the hint: exit 1.
    Said(Error, String),
}

impl Failure {
    /// The failure as `(REASON, message)`, for lists of per-item failures
    /// (push, pull, grep over several paths).
    pub fn text(&self) -> (String, String) {
        match self {
            Failure::Remote(e) | Failure::Hinted(e, _) => (e.reason().to_string(), e.to_string()),
            Failure::Said(e, line) => (e.reason().to_string(), line.clone()),
            Failure::Local(m) => ("LOCAL".to_string(), m.clone()),
            Failure::Usage(m) => ("USAGE".to_string(), m.clone()),
            Failure::Silent(code) | Failure::Code(code, _) => {
                ("FAILED".to_string(), format!("exit {code}"))
            }
        }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure::Remote(error)
    }
}

pub type Outcome<T = ()> = std::result::Result<T, Failure>;

/// A local I/O failure, with what was being done.
pub fn local(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> Failure {
    move |e| Failure::Local(format!("{what}: {e}"))
}

/// What every command works with.
pub struct Ctx {
    pub server: String,
    /// The session named by `--session` or `WSFS_SESSION`.
    pub session_id: Option<String>,
    /// The session `wsfs use` saved.
    saved_session: Option<String>,
    pub token: Option<String>,
    /// Whether the token is the one `wsfs use` saved (not a flag's or a
    /// variable's).
    token_saved: bool,
    /// The session [`Ctx::session_id`] settled on.
    resolved: Option<String>,
    pub json: bool,
    pub quiet: bool,
    /// CA certificate (PEM) for an https:// server.
    ca: Option<std::path::PathBuf>,
    client: Option<Client>,
}

impl Ctx {
    /// The connection, made on first use.
    pub async fn client(&mut self) -> Outcome<Client> {
        if let Some(client) = &self.client {
            return Ok(client.clone());
        }
        let mut client = self.connect().await?;
        if let Some(token) = &self.token {
            client = client.with_token(token)?;
        }
        self.client = Some(client.clone());
        Ok(client)
    }

    /// A new connection to the server, sending no token.
    pub async fn connect(&self) -> Outcome<Client> {
        Ok(match (&self.ca, self.server.starts_with("https://")) {
            (Some(ca), true) => {
                let pem = std::fs::read(ca).map_err(|e| {
                    Failure::Usage(format!(
                        "cannot read the CA certificate '{}': {e}",
                        ca.display()
                    ))
                })?;
                Client::connect_with_tls(&self.server, &pem).await?
            }
            _ => Client::connect(&self.server).await?,
        })
    }

    /// Where commands go, for the hints.
    pub fn reach(&self) -> Reach {
        Reach {
            server: self.server.clone(),
            token: self.token.is_some(),
        }
    }

    /// The session every file command works on: `--session` or
    /// `WSFS_SESSION`; else the session the token opens (tokens name their
    /// session, and the server says which); else the one `wsfs use` saved.
    /// A session named beside a token of another session is a usage error
    /// rather than a refusal from the server.
    pub async fn session_id(&mut self) -> Outcome<String> {
        if let Some(id) = &self.resolved {
            return Ok(id.clone());
        }
        let id = match (self.session_id.clone(), self.token.is_some()) {
            (Some(named), true) => match self.token_session().await {
                Ok(Some(own)) if own != named => {
                    return Err(Failure::Usage(format!(
                        "the session given (--session or WSFS_SESSION) is {named}, but the token \
                         (--token or WSFS_TOKEN) opens session {own}: drop the session to use the \
                         token's, or pass that session's token"
                    )))
                }
                // A server older than token sessions, or one that cannot
                // be reached, judges the call itself.
                _ => named,
            },
            (Some(named), false) => named,
            (None, true) if !(self.token_saved && self.saved_session.is_some()) => {
                match self.token_session().await? {
                    Some(own) => own,
                    None => self.saved_session.clone().ok_or_else(|| {
                        Failure::Usage(
                            "no session: the token names none (it is the admin token, or the server has tokens off); pass --session ID or set WSFS_SESSION"
                                .into(),
                        )
                    })?,
                }
            }
            (None, _) => self.saved_session.clone().ok_or_else(|| {
                Failure::Usage(
                    "no session: pass --session ID, set WSFS_SESSION or WSFS_TOKEN to a session's token (create one with `wsfs session create`)"
                        .into(),
                )
            })?,
        };
        self.resolved = Some(id.clone());
        Ok(id)
    }

    /// The session the token opens; `None` when it opens none in
    /// particular (the admin token, or a server with tokens off). A token
    /// that names its session says so itself; one of the older shape is
    /// asked about.
    async fn token_session(&mut self) -> Outcome<Option<String>> {
        if let Some(id) = self.token.as_deref().and_then(wsfs::token::session_of) {
            return Ok(Some(id.to_string()));
        }
        match self.client().await?.token_session().await {
            Ok(info) => Ok(Some(info.id)),
            Err(Error::InvalidArgument { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// A handle on the current session; it carries the client's token.
    pub async fn session(&mut self) -> Outcome<Session> {
        let id = self.session_id().await?;
        Ok(self.client().await?.session(id))
    }

    /// Prints a one-line confirmation unless `--quiet`; `--json` prints
    /// `value` instead.
    pub fn done(&self, text: impl FnOnce() -> String, value: serde_json::Value) -> Outcome {
        if self.json {
            output::print_json(&value)
        } else if !self.quiet {
            output::println(&text())
        } else {
            Ok(())
        }
    }
}

/// The server the CLI talks to when nothing names one.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:50051";

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.global.json;
    let reach = |server: &str| Reach {
        server: server.to_string(),
        token: given(&cli.global.token).is_some(),
    };
    // `wsfs use --clear` must work even when the saved file is broken.
    let clearing = matches!(cli.command, Command::Use { clear: true, .. });
    let saved = if clearing {
        context::Saved::default()
    } else {
        match context::load() {
            Ok(saved) => saved,
            Err(failure) => return report(failure, json, &reach(DEFAULT_SERVER)),
        }
    };
    let server = given(&cli.global.server)
        .or(saved.server)
        .unwrap_or_else(|| DEFAULT_SERVER.to_string());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let failure = Failure::Local(format!("cannot start: {e}"));
            return report(failure, json, &reach(&server));
        }
    };
    let flag_token = given(&cli.global.token);
    let mut ctx = Ctx {
        server: server_url(&server),
        session_id: given(&cli.global.session),
        saved_session: saved.session,
        token_saved: flag_token.is_none() && saved.token.is_some(),
        token: flag_token.or(saved.token),
        resolved: None,
        json,
        quiet: cli.global.quiet,
        ca: cli.global.ca.clone(),
        client: None,
    };
    let outcome = runtime.block_on(async {
        match dispatch(&mut ctx, cli.command).await {
            Err(Failure::Remote(error)) if doctor::connection_broke(&error) => {
                Err(doctor::explain_broken_connection(&ctx.server, error).await)
            }
            other => other,
        }
    });
    let reach = ctx.reach();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => report(failure, json, &reach),
    }
}

async fn dispatch(ctx: &mut Ctx, command: Command) -> Outcome {
    match command {
        Command::Session(c) => sessions::session(ctx, c).await,
        Command::Ls(a) => files::ls(ctx, a).await,
        Command::Cat(a) => files::cat(ctx, a).await,
        Command::Get(a) => files::get(ctx, a).await,
        Command::Put(a) => files::put(ctx, a).await,
        Command::Write(a) => files::write(ctx, a, false).await,
        Command::Append(a) => files::write(ctx, a, true).await,
        Command::Edit(a) => files::edit(ctx, a).await,
        Command::Rm(a) => files::rm(ctx, a).await,
        Command::Mkdir(a) => files::mkdir(ctx, a).await,
        Command::Mv(a) => files::transfer(ctx, a, true).await,
        Command::Cp(a) => files::transfer(ctx, a, false).await,
        Command::Stat(a) => files::stat(ctx, a).await,
        Command::Chmod(a) => files::chmod(ctx, a).await,
        Command::Glob(a) => search::glob(ctx, a).await,
        Command::Grep(a) => search::grep(ctx, a).await.map_err(|f| match f {
            Failure::Silent(code) => Failure::Silent(code),
            other => Failure::Code(2, Box::new(other)),
        }),
        Command::Watch(a) => search::watch(ctx, a).await,
        Command::Mcp => mcp::serve(ctx).await,
        Command::Mount(a) => mount::mount(ctx, a).await,
        Command::Unmount(a) => mount::unmount(ctx, a).await,
        Command::Use { session, clear } => use_context(ctx, session, clear).await,
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut command = args::Cli::command();
            // Into memory first: clap_complete panics on a failed write,
            // and `| head` closes stdout early.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, "wsfs", &mut script);
            output::print_raw(&script)
        }
        Command::Snapshot(c) => sessions::snapshot(ctx, c).await,
        Command::Export(a) => sessions::export(ctx, a).await,
        Command::Import(a) => sessions::import(ctx, a).await,
        Command::Token(c) => sessions::token(ctx, c).await,
        Command::Pull(a) => sync::pull(ctx, a).await,
        Command::Push(a) => sync::push(ctx, a).await,
        Command::Tree(a) => files::tree(ctx, a).await,
        Command::Du(a) => files::du(ctx, a).await,
        Command::Head(a) => files::head(ctx, a).await,
        Command::Tail(a) => files::tail(ctx, a).await,
        Command::Touch(a) => files::touch(ctx, a).await,
        Command::Version => doctor::version(ctx).await,
        Command::Doctor => doctor::doctor(ctx).await,
    }
}

/// `host:port` (as grpcurl and Python take it) means `http://host:port`.
fn server_url(raw: &str) -> String {
    if raw.contains("://") {
        raw.to_string()
    } else {
        format!("http://{raw}")
    }
}

/// Where the command went, for the hints: the server, and whether a token
/// was sent.
pub struct Reach {
    pub server: String,
    pub token: bool,
}

/// One line on stderr, `wsfs: REASON: message`, then a `hint:` line in the
/// CLI's own words when there is something to do (with `--json`, one JSON
/// object there instead), and the exit code.
fn report(failure: Failure, json: bool, reach: &Reach) -> ExitCode {
    let (failure, code_override) = match failure {
        Failure::Code(code, inner) => (*inner, Some(code)),
        other => (other, None),
    };
    let (code, reason, message, hint) = match failure {
        Failure::Silent(code) => return ExitCode::from(code),
        Failure::Remote(error) => (
            1,
            error.reason().to_string(),
            remote_message(&error),
            hint(&error, reach),
        ),
        Failure::Hinted(error, hint) => (
            1,
            error.reason().to_string(),
            remote_message(&error),
            Some(hint),
        ),
        Failure::Said(error, line) if !json => (1, error.reason().to_string(), line, None),
        Failure::Said(error, line) => (
            1,
            error.reason().to_string(),
            remote_message(&error),
            Some(line),
        ),
        Failure::Local(message) => (1, "LOCAL".to_string(), message, None),
        Failure::Usage(message) => (2, "USAGE".to_string(), message, None),
        Failure::Code(code, _) => (code, "INTERNAL".to_string(), "nested failure".into(), None),
    };
    // A closed stderr has nobody to tell: the exit code still says it.
    let mut err = std::io::stderr().lock();
    let _ = if json {
        writeln!(
            err,
            "{}",
            serde_json::json!({"error": {"reason": reason, "message": message, "hint": hint}})
        )
    } else if reason == "LOCAL" {
        writeln!(err, "wsfs: {message}")
    } else if reason == "USAGE" {
        writeln!(err, "wsfs: {message}\n\nRun `wsfs --help` for usage.")
    } else {
        writeln!(err, "wsfs: {reason}: {message}").and_then(|()| match hint {
            Some(hint) => writeln!(err, "hint: {hint}"),
            None => Ok(()),
        })
    };
    ExitCode::from(code_override.unwrap_or(code))
}

/// What to do next, in the CLI's words (the server's messages name RPC
/// fields, which a CLI user does not type).
fn hint(error: &Error, reach: &Reach) -> Option<String> {
    let server = &reach.server;
    Some(match error {
        Error::Unavailable { message } => return doctor::unavailable_hint(message, server),
        Error::TooLarge { limit, .. } => format!(
            "this session takes at most {} ({limit} bytes) per write; create a session with a \
             larger limit, e.g. `wsfs session create --max-write-bytes 1G` (up to the server's \
             --max-write-bytes)",
            output::human_size(*limit)
        ),
        Error::InvalidPath { message, .. } if message.contains("--max-path-depth") => {
            "paths deeper than the session allows need a new session: e.g. `wsfs session create \
             --max-path-depth 32`, then `wsfs push` or `wsfs import` the tree into it"
                .into()
        }
        Error::InvalidPath { message, .. } if message.contains("--max-segment-length") => {
            "longer names need a new session: e.g. `wsfs session create --max-segment-length \
             255` (at most 255 bytes a name on every backend)"
                .into()
        }
        Error::AmbiguousMatch { .. } => {
            "make --old match exactly once, or pass --all to replace every occurrence".into()
        }
        Error::NoMatch { .. } => {
            "--old must match the file exactly, whitespace included (see `wsfs cat`)".into()
        }
        Error::NotText { .. } => {
            "the file is not UTF-8 text: use `wsfs cat --bytes PATH` or `wsfs get PATH -`".into()
        }
        Error::VersionMismatch { current, .. } => format!(
            "the file changed since that version; read it again, then retry with --if-version {current}"
        ),
        Error::SessionNotFound { .. } => {
            "`wsfs session list` shows the sessions; `wsfs session create` makes one; a DIRECTORY \
             session whose server was replaced comes back with `wsfs session recover ID` (from \
             the object store)"
                .into()
        }
        Error::Unauthenticated { message } if reach.token && message.contains("admin token") => {
            "the token sent (WSFS_TOKEN or --token) opens one session's files, not the Sessions \
             service: this command needs the server's admin token (its --admin-token)"
                .into()
        }
        Error::Unauthenticated { .. } if reach.token => {
            "the server refused the token sent (WSFS_TOKEN or --token): check it, or issue a new \
             one with `wsfs token issue CALLER` using the admin token"
                .into()
        }
        Error::Unauthenticated { .. } => "set WSFS_TOKEN (or pass --token)".into(),
        Error::AlreadyExists { .. } => {
            "pass -f to replace it (cp, mv), or drop --create (write, put)".into()
        }
        Error::DirectoryNotEmpty { .. } => "pass -r to remove it with its contents".into(),
        _ => return None,
    })
}

/// The server's sentence, plus what to do when the server is older than
/// this command; a TLS failure in words rather than the TLS library's.
fn remote_message(error: &Error) -> String {
    match error {
        Error::Unimplemented { message } => {
            format!("not supported by this server yet: {message}")
        }
        Error::Unavailable { message } => doctor::plain_tls_message(message),
        other => other.to_string(),
    }
}

/// `wsfs use`: save, show or forget the context.
async fn use_context(ctx: &mut Ctx, session: Option<String>, clear: bool) -> Outcome {
    if clear {
        let had = context::clear()?;
        return ctx.done(
            || {
                if had {
                    "forgot the saved context".to_string()
                } else {
                    "no saved context".to_string()
                }
            },
            serde_json::json!({ "cleared": had }),
        );
    }
    let Some(session) = session else {
        let saved = context::load()?;
        let path = context::file().map(|p| p.display().to_string());
        if ctx.json {
            return output::print_json(&serde_json::json!({
                "file": path,
                "server": saved.server,
                "session": saved.session,
                "token": saved.token.is_some(),
            }));
        }
        let shown = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_string());
        output::println(&format!("server  {}", shown(&saved.server)))?;
        output::println(&format!("session {}", shown(&saved.session)))?;
        output::println(&format!(
            "token   {}",
            if saved.token.is_some() { "saved" } else { "-" }
        ))?;
        return Ok(());
    };
    // Only a session the server knows is saved.
    ctx.client().await?.get_session(&session).await?;
    let saved = context::Saved {
        server: Some(ctx.server.clone()),
        session: Some(session.clone()),
        token: ctx.token.clone(),
    };
    let path = context::save(&saved)?;
    ctx.done(
        || format!("using session {session} on {} (saved in {})", ctx.server, path.display()),
        serde_json::json!({ "server": ctx.server, "session": session, "file": path.display().to_string() }),
    )
}

/// A flag or variable's value, unless it is absent or empty (an empty
/// variable names nothing).
fn given(value: &Option<String>) -> Option<String> {
    value.clone().filter(|v| !v.is_empty())
}
