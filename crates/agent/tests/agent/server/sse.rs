//! Server-sent events as the tests read them: [`parse_sse`] and [`assert_numbered`].
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// One server-sent event: id, event name, data.
pub(crate) type Sse = (Option<String>, String, String);

/// The events of an SSE body, in order.
pub(crate) fn parse_sse(body: &str) -> Vec<Sse> {
    body.split("\n\n")
        .filter_map(|block| {
            let (mut id, mut event, mut data) = (None, None, String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("event:") {
                    event = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            event.map(|e| (id, e, data))
        })
        .collect()
}

/// The ids of `events` are `first`, `first + 1`, … with no gap and no duplicate.
pub(crate) fn assert_numbered_from(events: &[Sse], first: usize) {
    let ids: Vec<usize> = events
        .iter()
        .map(|(id, ..)| id.as_deref().expect("an event id").parse().unwrap())
        .collect();
    assert_eq!(
        ids,
        (first..first + ids.len()).collect::<Vec<_>>(),
        "ids with no gap or duplicate"
    );
}
