//! Independent runs (simulations, evaluation weeks) spread over the machine's cores, results
//! in input order. Each run is deterministic on its own, so which thread runs it changes
//! nothing.

/// How many threads [`map`] uses for `items` runs: the cores, at most one per run.
pub fn threads(items: usize) -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(items.max(1))
}

/// `f` applied to every item on [`threads`] threads (item i on thread i mod threads); the
/// results in the items' order.
pub fn map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = threads(items.len());
    let mut out: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let f = &f;
                scope.spawn(move || (t..items.len()).step_by(threads).map(|i| (i, f(&items[i]))).collect::<Vec<_>>())
            })
            .collect();
        for handle in handles {
            for (i, result) in handle.join().expect("a worker thread panicked") {
                out[i] = Some(result);
            }
        }
    });
    out.into_iter().map(|r| r.expect("every item ran")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_come_back_in_input_order() {
        let items: Vec<u64> = (0..37).collect();
        assert_eq!(super::map(&items, |x| x * x), items.iter().map(|x| x * x).collect::<Vec<_>>());
        assert_eq!(super::map(&[] as &[u64], |x| *x), Vec::<u64>::new());
    }
}
