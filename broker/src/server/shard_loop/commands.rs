//! Carrying out a session's commands on its connection: bytes sealed by the
//! transport and handed to the io layer, reading paused or resumed, the
//! connection closed (after a TLS handshake in progress, if one is).

use super::{Conn, Ending};
use crate::io::{ConnId, Connections};
use crate::server::session::{Command, Question};

/// Carries out the commands `conn`'s session issued, in order, up to a
/// question it asks the server, which is returned for the caller to answer
/// (the session asks nothing more before it is answered).
pub(super) fn carry_out(
    conn: &mut Conn,
    io: &mut Connections,
    id: ConnId,
    paused: &mut Vec<ConnId>,
) -> Option<Question> {
    let mut question = None;
    for command in conn.session.commands() {
        match command {
            Command::Send(bytes) => {
                let bytes = conn.transport.seal(bytes);
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
            Command::Close if conn.transport.awaits_handshake() => {
                if conn.ending == Ending::Open {
                    conn.ending = Ending::AfterHandshake;
                }
            }
            Command::Close => {
                if let Some(alert) = conn.transport.close_notify() {
                    io.send(id, alert);
                }
                io.close(id);
            }
            Command::CloseNow => io.close_now(id),
            Command::Ask(q) => question = Some(q),
        }
    }
    question
}
