//! A bounded set of futures polled together: how the helpers keep several
//! calls in flight from one task without spawning (so the futures may
//! borrow the client and need not be `'static`).

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

type BoxedFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub struct Window<'a, T> {
    futures: Vec<BoxedFuture<'a, T>>,
}

impl<T> Default for Window<'_, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a, T> Window<'a, T> {
    pub fn new() -> Self {
        Window { futures: Vec::new() }
    }

    pub fn len(&self) -> usize {
        self.futures.len()
    }

    pub fn is_empty(&self) -> bool {
        self.futures.is_empty()
    }

    pub fn push(&mut self, future: impl Future<Output = T> + Send + 'a) {
        self.futures.push(Box::pin(future));
    }

    /// The output of whichever future finishes next; `None` when empty.
    /// Polls every future on each wake-up, which is fine for the few dozen
    /// calls a window holds.
    pub async fn next(&mut self) -> Option<T> {
        if self.futures.is_empty() {
            return None;
        }
        poll_fn(|cx| {
            for i in 0..self.futures.len() {
                if let Poll::Ready(output) = self.futures[i].as_mut().poll(cx) {
                    drop(self.futures.swap_remove(i));
                    return Poll::Ready(Some(output));
                }
            }
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn outputs_come_in_completion_order() {
        let mut w = Window::new();
        for (i, ms) in [(0, 30u64), (1, 10), (2, 20)] {
            w.push(async move {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                i
            });
        }
        assert_eq!(w.len(), 3);
        let mut order = Vec::new();
        while let Some(i) = w.next().await {
            order.push(i);
        }
        assert_eq!(order, [1, 2, 0]);
        assert_eq!(w.len(), 0);
    }
}
