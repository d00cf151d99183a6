//! Queue handles: [`Queue`] (blocking) and [`AsyncQueue`] (async), from
//! `client.queue("orders")`. A handle is the client (one shared
//! connection) and the queue's name: cheap to make and to clone, and every
//! per-queue operation is a method on it, so code that works on one queue
//! does not repeat its name. The name is checked at each request, like
//! the client's own methods do.

// The operations' names are imported where the macro is expanded (each
// handle's module), so that each module says what it uses.

/// The operations, written once for both handles: `$($aw)*` is `.await`
/// for the async one and nothing for the blocking one.
macro_rules! queue_ops {
    ($handle:ident, $($async_:ident)?, [$($aw:tt)*]) => {
        impl $handle {
            /// The queue's name.
            #[must_use]
            pub fn name(&self) -> &str {
                &self.name
            }

            /// Creates the queue; absent options take their defaults.
            /// Returns true when it was created, false when it existed with
            /// the same attributes.
            ///
            /// # Errors
            /// `QueueExists` when it exists with different attributes;
            /// `InvalidArgument` for a bad name or option.
            pub $($async_)? fn create(&self, options: &QueueOptions) -> Result<bool> {
                self.client.create_queue(&self.name, options) $($aw)*
            }

            /// Changes the attributes `options` sets (and removes the
            /// policies it clears), leaving the others as they are.
            ///
            /// # Errors
            /// `QueueNotFound`, `InvalidArgument`.
            pub $($async_)? fn update(&self, options: &QueueOptions) -> Result<()> {
                self.client.set_queue(&self.name, options) $($aw)*
            }

            /// Deletes the queue and its messages.
            ///
            /// # Errors
            /// `QueueNotFound`; `InvalidArgument` when another queue names
            /// it as its dead-letter queue.
            pub $($async_)? fn delete_queue(&self) -> Result<()> {
                self.client.delete_queue(&self.name) $($aw)*
            }

            /// The queue's attributes and counters, in one request.
            ///
            /// # Errors
            /// `QueueNotFound`.
            pub $($async_)? fn info(&self) -> Result<QueueInfo> {
                self.client.queue_info(&self.name) $($aw)*
            }

            /// The queue's attributes.
            ///
            /// # Errors
            /// `QueueNotFound`.
            pub $($async_)? fn attributes(&self) -> Result<QueueAttributes> {
                Ok(self.info() $($aw)*?.attributes)
            }

            /// The queue's counters.
            ///
            /// # Errors
            /// `QueueNotFound`.
            pub $($async_)? fn stats(&self) -> Result<QueueStats> {
                Ok(self.info() $($aw)*?.stats)
            }

            /// Removes every message; returns how many.
            ///
            /// # Errors
            /// `QueueNotFound`.
            pub $($async_)? fn purge(&self) -> Result<usize> {
                self.client.purge_queue(&self.name) $($aw)*
            }

            /// Sends one message with just a body.
            ///
            /// # Errors
            /// The request's or the entry's error (`QueueNotFound`,
            /// `MessageTooLarge`, `QueueFull`, `Busy`, ...).
            pub $($async_)? fn send(&self, body: impl Into<Bytes>) -> Result<SendOutcome> {
                self.client.send(&self.name, body) $($aw)*
            }

            /// Sends one message with options (delay, dedup key,
            /// attributes).
            ///
            /// # Errors
            /// As [`send`](Self::send).
            pub $($async_)? fn send_entry(&self, entry: SendEntry) -> Result<SendOutcome> {
                self.client.send_entry(&self.name, entry) $($aw)*
            }

            /// Sends up to 1,024 messages in one request: one result per
            /// entry, in order.
            ///
            /// # Errors
            /// The outer error when the request failed as a whole.
            pub $($async_)? fn send_batch(&self, entries: &[SendEntry]) -> Result<Vec<Result<SendOutcome>>> {
                self.client.send_batch(&self.name, entries) $($aw)*
            }

            /// Sends up to 1,024 bare bodies, borrowed and copied once
            /// (see the client's `send_bodies`): one result per body.
            ///
            /// # Errors
            /// The outer error when the request failed as a whole.
            pub $($async_)? fn send_bodies(&self, bodies: &[&[u8]]) -> Result<Vec<Result<SendOutcome>>> {
                self.client.send_bodies(&self.name, bodies) $($aw)*
            }

            /// Receives (leases) up to `options.max_messages` messages,
            /// left in the reply's wire form (see the client's
            /// `receive_batch`): iterate them as borrowed views.
            ///
            /// # Errors
            /// `QueueNotFound`, `InvalidArgument`.
            pub $($async_)? fn receive_batch(&self, options: ReceiveOptions) -> Result<ReceivedBatch> {
                self.client.receive_batch(&self.name, options) $($aw)*
            }

            /// Sends up to 1,024 entries given as borrowed views, each
            /// copied once (see the client's `send_views`): one result per
            /// entry.
            ///
            /// # Errors
            /// The outer error when the request failed as a whole.
            pub $($async_)? fn send_views(&self, entries: &[SendEntryRef<'_>]) -> Result<Vec<Result<SendOutcome>>> {
                self.client.send_views(&self.name, entries) $($aw)*
            }

            /// Receives (leases) up to `options.max_messages` messages,
            /// waiting up to `options.wait` for the first.
            ///
            /// # Errors
            /// `QueueNotFound`, `InvalidArgument`.
            pub $($async_)? fn receive(&self, options: ReceiveOptions) -> Result<Vec<ReceivedMessage>> {
                self.client.receive(&self.name, options) $($aw)*
            }

            /// Deletes one delivered message.
            ///
            /// # Errors
            /// `StaleReceipt`, `Gone`, `InvalidReceipt`.
            pub $($async_)? fn delete(&self, receipt: Receipt) -> Result<()> {
                self.client.delete(&self.name, receipt) $($aw)*
            }

            /// Deletes up to 1,024 delivered messages: one result per
            /// receipt.
            ///
            /// # Errors
            /// The outer error when the request failed as a whole.
            pub $($async_)? fn delete_batch(&self, receipts: &[Receipt]) -> Result<Vec<Result<()>>> {
                self.client.delete_batch(&self.name, receipts) $($aw)*
            }

            /// Ends a lease `timeout` from now (extends or shortens it);
            /// zero releases the message at once.
            ///
            /// # Errors
            /// As [`delete`](Self::delete).
            pub $($async_)? fn change_visibility(&self, receipt: Receipt, timeout: Duration) -> Result<()> {
                self.client.change_visibility(&self.name, receipt, timeout) $($aw)*
            }

            /// Changes up to 1,024 leases: one result per entry.
            ///
            /// # Errors
            /// The outer error when the request failed as a whole.
            pub $($async_)? fn change_visibility_batch(&self, changes: &[(Receipt, Duration)]) -> Result<Vec<Result<()>>> {
                self.client.change_visibility_batch(&self.name, changes) $($aw)*
            }

            /// Reads up to `max_messages` visible messages without leasing
            /// them.
            ///
            /// # Errors
            /// `QueueNotFound`, `InvalidArgument`.
            pub $($async_)? fn peek(&self, max_messages: usize) -> Result<Vec<PeekedMessage>> {
                self.client.peek(&self.name, max_messages) $($aw)*
            }

            /// Moves up to `max_messages` visible messages of this
            /// dead-letter queue back to the queues they came from.
            ///
            /// # Errors
            /// `QueueNotFound`.
            pub $($async_)? fn redrive(&self, max_messages: usize) -> Result<RedriveOutcome> {
                self.client.redrive(&self.name, max_messages) $($aw)*
            }
        }
    };
}

#[cfg(feature = "blocking")]
pub use blocking::Queue;

#[cfg(feature = "blocking")]
mod blocking {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use sluice_protocol::{
        PeekedMessage, Receipt, ReceivedBatch, ReceivedMessage, SendEntryRef, SendOutcome,
    };

    use crate::attributes::{QueueAttributes, QueueInfo, QueueOptions, QueueStats};
    use crate::error::Result;
    use crate::message::SendEntry;
    use crate::ops::{ReceiveOptions, RedriveOutcome};
    use crate::{Client, PendingReply};

    /// One queue of a blocking [`Client`]: `client.queue("orders")`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use sluice_broker::testing::TestServer;
    /// use sluice_client::{Client, ClientConfig, QueueOptions, ReceiveOptions};
    ///
    /// let server = TestServer::start();
    /// let client = Client::connect(ClientConfig::new(server.addr().to_string()))?;
    /// let orders = client.queue("orders");
    /// orders.create(&QueueOptions::new().visibility_timeout(Duration::from_secs(60)))?;
    /// orders.send("order 42")?;
    /// let got = orders.receive(ReceiveOptions::new(10).wait(Duration::from_secs(1)))?;
    /// orders.delete(got[0].receipt)?;
    /// assert_eq!(orders.stats()?.depth(), 0);
    /// # Ok::<(), sluice_client::Error>(())
    /// ```
    #[derive(Clone, Debug)]
    pub struct Queue {
        pub(super) client: Client,
        pub(super) name: Arc<str>,
    }

    queue_ops!(Queue, , []);

    impl Queue {
        /// The client the handle uses.
        #[must_use]
        pub fn client(&self) -> &Client {
            &self.client
        }

        /// [`send_batch`](Queue::send_batch) without waiting: several
        /// batches can be in flight on the connection from one thread.
        ///
        /// # Errors
        /// When nothing could be sent.
        pub fn start_send_batch(
            &self,
            entries: &[SendEntry],
        ) -> Result<PendingReply<Vec<Result<SendOutcome>>>> {
            self.client.start_send_batch(&self.name, entries)
        }

        /// [`send_views`](Queue::send_views) without waiting.
        ///
        /// # Errors
        /// When nothing could be sent.
        pub fn start_send_views(
            &self,
            entries: &[SendEntryRef<'_>],
        ) -> Result<PendingReply<Vec<Result<SendOutcome>>>> {
            self.client.start_send_views(&self.name, entries)
        }

        /// [`send_bodies`](Queue::send_bodies) without waiting.
        ///
        /// # Errors
        /// When nothing could be sent.
        pub fn start_send_bodies(
            &self,
            bodies: &[&[u8]],
        ) -> Result<PendingReply<Vec<Result<SendOutcome>>>> {
            self.client.start_send_bodies(&self.name, bodies)
        }

        /// [`receive_batch`](Queue::receive_batch) without waiting.
        ///
        /// # Errors
        /// When nothing could be sent.
        pub fn start_receive_batch(
            &self,
            options: ReceiveOptions,
        ) -> Result<PendingReply<ReceivedBatch>> {
            self.client.start_receive_batch(&self.name, options)
        }

        /// [`receive`](Queue::receive) without waiting.
        ///
        /// # Errors
        /// When nothing could be sent.
        pub fn start_receive(
            &self,
            options: ReceiveOptions,
        ) -> Result<PendingReply<Vec<ReceivedMessage>>> {
            self.client.start_receive(&self.name, options)
        }

        /// [`delete_batch`](Queue::delete_batch) without waiting.
        ///
        /// # Errors
        /// When nothing could be sent.
        pub fn start_delete_batch(
            &self,
            receipts: &[Receipt],
        ) -> Result<PendingReply<Vec<Result<()>>>> {
            self.client.start_delete_batch(&self.name, receipts)
        }
    }

    impl Client {
        /// A handle on the queue `name`, for its per-queue operations. It
        /// shares this client's connection; nothing is sent until it is
        /// used.
        #[must_use]
        pub fn queue(&self, name: impl Into<Arc<str>>) -> Queue {
            Queue {
                client: self.clone(),
                name: name.into(),
            }
        }
    }
}

#[cfg(feature = "async")]
pub use asynchronous::{AsyncQueue, MessageStream};

#[cfg(feature = "async")]
mod asynchronous {
    use std::collections::VecDeque;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use sluice_protocol::{
        PeekedMessage, Receipt, ReceivedBatch, ReceivedMessage, SendEntryRef, SendOutcome,
    };

    use crate::AsyncClient;
    use crate::attributes::{QueueAttributes, QueueInfo, QueueOptions, QueueStats};
    use crate::error::Result;
    use crate::message::SendEntry;
    use crate::ops::{ReceiveOptions, RedriveOutcome};

    /// One queue of an [`AsyncClient`]: `client.queue("orders")`. Besides
    /// the single operations it turns the queue into a [`MessageStream`]
    /// ([`AsyncQueue::messages`]).
    #[derive(Clone, Debug)]
    pub struct AsyncQueue {
        pub(super) client: AsyncClient,
        pub(super) name: Arc<str>,
    }

    queue_ops!(AsyncQueue, async, [.await]);

    impl AsyncQueue {
        /// The client the handle uses.
        #[must_use]
        pub fn client(&self) -> &AsyncClient {
            &self.client
        }

        /// The queue's messages as a stream: it receives with `options`
        /// (batches of up to `options.max_messages`, long-polling up to
        /// `options.wait`, or the queue's default wait) and yields the
        /// messages one at a time, receiving again when the batch is used
        /// up, for as long as it is polled. Each message is leased as by
        /// [`receive`](AsyncQueue::receive): delete it (or let its lease
        /// run out) as usual. A message received but not yet yielded when
        /// the stream is dropped is redelivered when its lease ends. Give it
        /// a wait (up to 20 s): with a zero wait, a stream on an empty queue
        /// asks the server again after every empty answer.
        ///
        /// A failed receive is yielded as an `Err`; after a
        /// [retryable](crate::Error::is_retryable) one the stream goes on
        /// (the client's reconnect backoff spaces the attempts out), after
        /// any other (`QueueNotFound`, `InvalidArgument`, ...) it ends.
        pub fn messages(&self, options: ReceiveOptions) -> MessageStream {
            MessageStream {
                queue: self.clone(),
                options,
                ready: VecDeque::new(),
                receiving: None,
                ended: false,
            }
        }
    }

    type Receiving = Pin<Box<dyn Future<Output = Result<Vec<ReceivedMessage>>> + Send>>;

    /// The messages of a queue, received in batches: a
    /// [`futures_core::Stream`] of `Result<ReceivedMessage>`, from
    /// [`AsyncQueue::messages`]. Use it with the combinators of
    /// `futures` or `tokio-stream`, or poll it with
    /// [`MessageStream::next`].
    #[must_use = "a stream receives nothing until it is polled"]
    pub struct MessageStream {
        queue: AsyncQueue,
        options: ReceiveOptions,
        /// Received and not yet yielded.
        ready: VecDeque<ReceivedMessage>,
        /// The receive in flight, if any.
        receiving: Option<Receiving>,
        /// Set after a permanent error.
        ended: bool,
    }

    impl std::fmt::Debug for MessageStream {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("MessageStream")
                .field("queue", &self.queue.name)
                .field("options", &self.options)
                .field("ready", &self.ready.len())
                .field("receiving", &self.receiving.is_some())
                .field("ended", &self.ended)
                .finish()
        }
    }

    impl MessageStream {
        /// The next message: `None` only after a permanent error.
        pub async fn next(&mut self) -> Option<Result<ReceivedMessage>> {
            std::future::poll_fn(|cx| futures_core::Stream::poll_next(Pin::new(&mut *self), cx))
                .await
        }
    }

    impl futures_core::Stream for MessageStream {
        type Item = Result<ReceivedMessage>;

        fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            let this = self.get_mut();
            if let Some(message) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(message)));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            let receiving = this.receiving.get_or_insert_with(|| {
                let (queue, options) = (this.queue.clone(), this.options);
                Box::pin(async move { queue.receive(options).await })
            });
            let Poll::Ready(result) = receiving.as_mut().poll(cx) else {
                return Poll::Pending;
            };
            this.receiving = None;
            match result {
                Ok(messages) => {
                    this.ready.extend(messages);
                    match this.ready.pop_front() {
                        Some(message) => Poll::Ready(Some(Ok(message))),
                        None => {
                            // The wait ended empty: receive again, from the
                            // executor's next turn rather than in a loop here.
                            cx.waker().wake_by_ref();
                            Poll::Pending
                        }
                    }
                }
                Err(err) => {
                    this.ended = !err.is_retryable();
                    Poll::Ready(Some(Err(err)))
                }
            }
        }

        fn size_hint(&self) -> (usize, Option<usize>) {
            let upper = if self.ended {
                Some(self.ready.len())
            } else {
                None
            };
            (self.ready.len(), upper)
        }
    }

    impl AsyncClient {
        /// A handle on the queue `name`, for its per-queue operations and
        /// its [message stream](AsyncQueue::messages). It shares this
        /// client's connection; nothing is sent until it is used.
        #[must_use]
        pub fn queue(&self, name: impl Into<Arc<str>>) -> AsyncQueue {
            AsyncQueue {
                client: self.clone(),
                name: name.into(),
            }
        }
    }
}
