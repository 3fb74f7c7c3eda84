//! Stream producers: the tasks that fill a response stream's channel.
//!
//! A panic inside a producer must not look like the end of the stream: a
//! grep that stops early would read as a complete answer, a ZIP cut short as
//! a finished archive. Every producer is started through [`spawn_blocking`]
//! or [`spawn`], which catch the panic and send an INTERNAL error as the
//! stream's last item instead.

use futures::FutureExt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use tokio::sync::mpsc::Sender;
use wsfs::Error;

/// Runs `produce` on the blocking pool with `tx`; a panic becomes an
/// INTERNAL error naming `what`, sent as the last item.
pub fn spawn_blocking<T, E>(
    what: &'static str,
    tx: Sender<Result<T, E>>,
    produce: impl FnOnce(Sender<Result<T, E>>) + Send + 'static,
) where
    T: Send + 'static,
    E: From<Error> + Send + 'static,
{
    let errors = tx.clone();
    tokio::task::spawn_blocking(move || {
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| produce(tx))) {
            // Fails quietly when the consumer is gone: nobody is left to tell.
            let _ = errors.blocking_send(Err(panicked(what, &*panic).into()));
        }
    });
}

/// Runs `produce` as a task; a panic becomes an INTERNAL error naming
/// `what`, sent as the last item on `tx`.
pub fn spawn<T, E>(
    what: &'static str,
    tx: Sender<Result<T, E>>,
    produce: impl Future<Output = ()> + Send + 'static,
) where
    T: Send + 'static,
    E: From<Error> + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(panic) = AssertUnwindSafe(produce).catch_unwind().await {
            let _ = tx.send(Err(panicked(what, &*panic).into())).await;
        }
    });
}

/// The error a caught panic becomes.
pub fn panicked(what: &str, panic: &(dyn std::any::Any + Send)) -> Error {
    Error::internal(format!(
        "{what} failed on a server bug ({}); other requests are unaffected, report it with this message",
        panic_message(panic)
    ))
}

/// The text a panic carried, if it carried text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}
