//! data/graphs holds exactly what `memcal graphs` writes (the zoo and the measured real models'
//! imported graphs): a graph measured is a graph planned.

use std::path::Path;

#[test]
fn data_graphs_are_the_zoo_and_the_measured_models_byte_for_byte() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("data/graphs");
    let zoo = memcal::zoo::data_graphs(&root.join("data/models")).unwrap();
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let expected: Vec<String> = zoo.iter().map(|g| format!("{}.json", g.name)).collect();
    assert_eq!(on_disk, expected, "run `memcal graphs --out data/graphs`");
    for g in &zoo {
        let bytes = std::fs::read(dir.join(format!("{}.json", g.name))).unwrap();
        assert!(
            bytes == memcal::zoo::to_bytes(g),
            "data/graphs/{}.json differs from what memcal graphs writes: run `memcal graphs --out data/graphs` (rows measured on the old file are then excluded as `graph changed`)",
            g.name
        );
    }
}
