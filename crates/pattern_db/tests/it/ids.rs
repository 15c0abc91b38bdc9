//! Snowflake ids under contention: unique across threads, strictly increasing per thread.

use std::collections::HashSet;
use std::sync::Arc;

use pattern_db::SnowflakeGenerator;

#[test]
fn eight_threads_hundred_thousand_ids_each_no_duplicates() {
    let generator = Arc::new(SnowflakeGenerator::new(5).unwrap());
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let g = generator.clone();
            std::thread::spawn(move || {
                let mut ids = Vec::with_capacity(100_000);
                for _ in 0..100_000 {
                    ids.push(g.next_id().unwrap());
                }
                ids
            })
        })
        .collect();
    let mut all = HashSet::with_capacity(800_000);
    for h in handles {
        let ids = h.join().unwrap();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "a thread saw ids out of order"
        );
        for id in ids {
            assert_eq!(id.machine_id(), 5);
            assert!(all.insert(id), "duplicate id {id}");
        }
    }
    assert_eq!(all.len(), 800_000);
}

#[test]
fn generators_with_different_machine_ids_never_collide() {
    let a = SnowflakeGenerator::new(1).unwrap();
    let b = SnowflakeGenerator::new(2).unwrap();
    let mut seen = HashSet::new();
    for _ in 0..50_000 {
        assert!(seen.insert(a.next_id().unwrap()));
        assert!(seen.insert(b.next_id().unwrap()));
    }
}
