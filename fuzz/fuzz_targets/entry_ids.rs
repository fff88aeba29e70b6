//! Stream entry ids (`<ms>-<seq>`) as clients send them (page tokens, dead
//! letter ids, seek targets): arbitrary text → `parse_entry_id` and the
//! helpers around it.

#![no_main]

use libfuzzer_sys::fuzz_target;
use redq::model::{
    entry_id_after, entry_id_before, entry_time_ms, is_entry_id, is_scheduled_id, parse_entry_id,
};

fuzz_target!(|text: &str| {
    let parsed = parse_entry_id(text);
    assert_eq!(is_entry_id(text), parsed.is_some());
    let _ = is_scheduled_id(text);
    let _ = entry_time_ms(text);
    let before = entry_id_before(text);
    let after = entry_id_after(text);

    let Some((ms, seq)) = parsed else {
        assert_eq!(after, None);
        return;
    };
    assert!(!is_scheduled_id(text));
    assert_eq!(entry_time_ms(text), Some(ms));
    // The canonical form (no leading zeros) parses to the same numbers.
    let canonical = format!("{ms}-{seq}");
    assert_eq!(parse_entry_id(&canonical), Some((ms, seq)));

    // `before` and `after` are the neighbours in (ms, seq) order.
    let before = parse_entry_id(&before).expect("entry_id_before gives an entry id");
    if (ms, seq) == (0, 0) {
        assert_eq!(before, (0, 0));
    } else {
        assert!(before < (ms, seq), "{text:?}: {before:?}");
        let next = entry_id_after(&format!("{}-{}", before.0, before.1));
        assert_eq!(next.as_deref(), Some(canonical.as_str()), "{text:?}");
    }
    match after {
        Some(after) => {
            let after = parse_entry_id(&after).expect("entry_id_after gives an entry id");
            assert!(after > (ms, seq), "{text:?}: {after:?}");
        }
        None => assert_eq!((ms, seq), (u64::MAX, u64::MAX)),
    }
});
