//! Carrying out a session's commands on its connection: bytes sealed by the
//! transport and handed to the io layer, reading paused or resumed, the
//! connection closed (after a TLS handshake in progress, if one is).

use super::{Conn, Ending};
use crate::io::{ConnId, Connections};
use crate::server::session::{Command, Question};
use crate::server::transport::Transport;

/// Carries out the commands `conn`'s session issued, in order, up to a
/// question it asks the server, which is returned for the caller to answer
/// (the session asks nothing more before it is answered). With `held`
/// (`--durability always`), what would reach the peer (bytes, closes)
/// waits there, in order, for the turn's log sync.
pub(super) fn carry_out(
    conn: &mut Conn,
    io: &mut Connections,
    id: ConnId,
    paused: &mut Vec<ConnId>,
    mut held: Option<&mut Vec<(ConnId, Command)>>,
) -> Option<Question> {
    let mut question = None;
    let Conn {
        session,
        transport,
        ending,
        ..
    } = conn;
    for command in session.commands() {
        match (command, held.as_deref_mut()) {
            (c @ (Command::Send(_) | Command::Close | Command::CloseNow), Some(held)) => {
                held.push((id, c));
            }
            (c, _) => {
                if let Some(q) = apply(transport, ending, io, id, c, paused) {
                    question = Some(q);
                }
            }
        }
    }
    question
}

/// Carries out one command; a question is returned for the caller.
pub(super) fn apply(
    transport: &mut Transport,
    ending: &mut Ending,
    io: &mut Connections,
    id: ConnId,
    command: Command,
    paused: &mut Vec<ConnId>,
) -> Option<Question> {
    match command {
        Command::Send(bytes) => {
            let bytes = transport.seal(bytes);
            if !bytes.is_empty() {
                io.send(id, bytes);
            }
        }
        Command::SetReading(on) => {
            io.set_reading(id, on);
            if !on {
                paused.push(id);
            }
        }
        Command::Close if transport.awaits_handshake() => {
            if *ending == Ending::Open {
                *ending = Ending::AfterHandshake;
            }
        }
        Command::Close => {
            if let Some(alert) = transport.close_notify() {
                io.send(id, alert);
            }
            io.close(id);
        }
        Command::CloseNow => io.close_now(id),
        Command::Ask(q) => return Some(q),
    }
    None
}
