//! Listing queues page by page: [`QueueNames`], an iterator for the
//! blocking client, and [`QueueNameStream`], a [`futures_core::Stream`] for
//! the async one. A server of protocol version 3 answers `LIST_QUEUES` in
//! pages, each one frame, saying whether more follow; each page is asked
//! for after the last name of the one before, so a listing holds every
//! queue however many there are. An older server answers one frame's worth
//! in one reply.

use std::collections::VecDeque;

use crate::error::Result;

/// One page: its names, and the name the next one starts after (`None`
/// when it was the last).
pub(crate) type Page = (Vec<String>, Option<String>);

/// What is left of a listing, shared by the iterator and the stream.
#[derive(Debug, Default)]
pub(crate) struct Walk {
    /// Fetched and not yet yielded.
    ready: VecDeque<String>,
    /// The name the next page starts after; `None` once the last page came
    /// (or a page failed: a listing does not go on after an error).
    next: Option<String>,
}

impl Walk {
    fn new() -> Walk {
        Walk {
            ready: VecDeque::new(),
            next: Some(String::new()),
        }
    }

    /// The next name already fetched, or whether a page must be fetched.
    fn take(&mut self) -> Option<String> {
        self.ready.pop_front()
    }

    fn page(&mut self, result: Result<Page>) -> Option<Result<String>> {
        match result {
            Ok((names, next)) => {
                self.ready.extend(names);
                self.next = next;
                self.ready.pop_front().map(Ok)
            }
            Err(e) => {
                self.next = None;
                Some(Err(e))
            }
        }
    }
}

#[cfg(feature = "blocking")]
pub use blocking::QueueNames;

#[cfg(feature = "blocking")]
mod blocking {
    use super::{Result, Walk};
    use crate::Client;

    /// The names of the queues with a prefix, in name order, fetched a page
    /// at a time: from [`Client::queue_names`]. A failed page is yielded as
    /// an `Err` and ends the listing.
    #[derive(Debug)]
    #[must_use = "an iterator fetches nothing until it is used"]
    pub struct QueueNames {
        client: Client,
        prefix: String,
        walk: Walk,
    }

    impl QueueNames {
        pub(crate) fn new(client: Client, prefix: &str) -> QueueNames {
            QueueNames {
                client,
                prefix: prefix.to_owned(),
                walk: Walk::new(),
            }
        }
    }

    impl Iterator for QueueNames {
        type Item = Result<String>;

        fn next(&mut self) -> Option<Result<String>> {
            loop {
                if let Some(name) = self.walk.take() {
                    return Some(Ok(name));
                }
                let after = self.walk.next.take()?;
                let page = self.client.list_page(&self.prefix, &after);
                match self.walk.page(page) {
                    Some(item) => return Some(item),
                    // An empty page that says more follow cannot happen (a
                    // page holds at least one name); go on or end.
                    None => continue,
                }
            }
        }
    }
}

#[cfg(feature = "async")]
pub use stream::QueueNameStream;

#[cfg(feature = "async")]
mod stream {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use super::{Page, Result, Walk};
    use crate::AsyncClient;

    type Fetching = Pin<Box<dyn Future<Output = Result<Page>> + Send>>;

    /// The names of the queues with a prefix, in name order, fetched a page
    /// at a time: a [`futures_core::Stream`] from
    /// [`AsyncClient::queue_names`], or poll it with
    /// [`QueueNameStream::next`]. A failed page is yielded as an `Err` and
    /// ends the listing.
    #[must_use = "a stream fetches nothing until it is polled"]
    pub struct QueueNameStream {
        client: AsyncClient,
        prefix: String,
        walk: Walk,
        fetching: Option<Fetching>,
    }

    impl std::fmt::Debug for QueueNameStream {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("QueueNameStream")
                .field("prefix", &self.prefix)
                .field("walk", &self.walk)
                .field("fetching", &self.fetching.is_some())
                .finish_non_exhaustive()
        }
    }

    impl QueueNameStream {
        pub(crate) fn new(client: AsyncClient, prefix: &str) -> QueueNameStream {
            QueueNameStream {
                client,
                prefix: prefix.to_owned(),
                walk: Walk::new(),
                fetching: None,
            }
        }

        /// The next name; `None` at the end.
        pub async fn next(&mut self) -> Option<Result<String>> {
            std::future::poll_fn(|cx| futures_core::Stream::poll_next(Pin::new(&mut *self), cx))
                .await
        }
    }

    impl futures_core::Stream for QueueNameStream {
        type Item = Result<String>;

        fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            let this = self.get_mut();
            loop {
                if let Some(name) = this.walk.take() {
                    return Poll::Ready(Some(Ok(name)));
                }
                if this.fetching.is_none() {
                    let Some(after) = this.walk.next.take() else {
                        return Poll::Ready(None);
                    };
                    let (client, prefix) = (this.client.clone(), this.prefix.clone());
                    this.fetching =
                        Some(Box::pin(
                            async move { client.list_page(&prefix, &after).await },
                        ));
                }
                let Some(fetching) = this.fetching.as_mut() else {
                    return Poll::Ready(None);
                };
                let Poll::Ready(page) = fetching.as_mut().poll(cx) else {
                    return Poll::Pending;
                };
                this.fetching = None;
                if let Some(item) = this.walk.page(page) {
                    return Poll::Ready(Some(item));
                }
            }
        }
    }
}
