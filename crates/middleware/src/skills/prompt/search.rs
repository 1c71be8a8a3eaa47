//! [`SkillIndex`]: BM25 search over skill names and descriptions, for the `search_skills` tool.
//!
//! Hand-written rather than the `bm25` crate (2.3): with its default tokenizer that crate pulls in
//! ~50 crates (caching, stemmers, stop-word lists); in a release probe on the 2-core dev machine it
//! built a 20,000-skill index in ~470 ms and answered a query in 10-15 ms. This index builds in
//! ~20 ms at 5,000 skills and ~80 ms at 20,000 (under load), answers in ~0.3 ms at 20,000, and
//! needs no dependency (numbers from `benches/skills_discovery.rs`).
//!
//! Tokens: lowercase alphanumeric runs (so `web-research` gives `web` and `research`), with a plural
//! `s` dropped from words longer than three letters; characters of scripts written without spaces
//! (CJK, kana, Thai, …) give one token per character and one per adjacent pair. Name tokens count
//! twice. Scoring is Okapi BM25 (k1 = 1.2, b = 0.75). A query equal to a skill's name (ignoring case
//! and surrounding space) always ranks that skill first, so every skill is findable by its exact
//! name.

use std::collections::HashMap;

use crate::skills::catalog::SkillCatalog;

const K1: f32 = 1.2;
const B: f32 = 0.75;
const NAME_WEIGHT: u32 = 2;

/// One search result.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// Index of the skill in the catalog's [`skills`](SkillCatalog::skills).
    pub index: usize,
    /// The skill's name.
    pub name: String,
    /// The BM25 score (`f32::INFINITY` for an exact name match).
    pub score: f32,
}

/// An inverted index over one catalog's names and descriptions. Build it once per catalog (it is
/// cheap) and search it with that same catalog; it does not borrow the catalog, and it copies no
/// names or descriptions (about 0.3 KB per skill).
#[derive(Debug, Clone, Default)]
pub struct SkillIndex {
    /// Hash of each skill's normalized name, for exact-name lookups.
    name_hashes: Vec<u64>,
    postings: HashMap<Box<str>, Vec<(u32, u32)>>,
    lengths: Vec<u32>,
    average_length: f32,
}

/// A [`SkillIndex`] built by its first search instead of when the view holding it is made: most
/// runs never call `search_skills`, and a new process at 5,000 skills would otherwise spend ~20 ms
/// of its start indexing. Search it with the same catalog every time (the one it was made for).
#[derive(Debug, Default)]
pub struct LazySkillIndex(std::sync::OnceLock<SkillIndex>);

impl LazySkillIndex {
    /// An index not built yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The index of `catalog`, built on the first call.
    pub fn get(&self, catalog: &SkillCatalog) -> &SkillIndex {
        self.0.get_or_init(|| SkillIndex::new(catalog))
    }

    /// True once a search has built it.
    pub fn is_built(&self) -> bool {
        self.0.get().is_some()
    }
}

impl SkillIndex {
    /// Index every skill of `catalog`.
    pub fn new(catalog: &SkillCatalog) -> Self {
        let skills = catalog.skills();
        let mut index = Self {
            name_hashes: Vec::with_capacity(skills.len()),
            postings: HashMap::new(),
            lengths: Vec::with_capacity(skills.len()),
            average_length: 0.0,
        };
        let mut counts: HashMap<String, u32> = HashMap::new();
        for (doc, skill) in skills.iter().enumerate() {
            counts.clear();
            let mut length = 0u32;
            for token in tokens(&skill.name) {
                *counts.entry(token).or_default() += NAME_WEIGHT;
                length += NAME_WEIGHT;
            }
            for token in tokens(&skill.description) {
                *counts.entry(token).or_default() += 1;
                length += 1;
            }
            let id = u32::try_from(doc).unwrap_or(u32::MAX);
            for (token, tf) in counts.drain() {
                index
                    .postings
                    .entry(token.into_boxed_str())
                    .or_default()
                    .push((id, tf));
            }
            index.lengths.push(length);
            index.name_hashes.push(name_hash(&skill.name));
        }
        for postings in index.postings.values_mut() {
            postings.shrink_to_fit();
        }
        let total: u64 = index.lengths.iter().map(|&l| u64::from(l)).sum();
        index.average_length = if index.lengths.is_empty() {
            1.0
        } else {
            (total as f32 / index.lengths.len() as f32).max(1.0)
        };
        index
    }

    /// Number of indexed skills.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    /// True when nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// The best `limit` skills of `catalog` (the one the index was built from) for `query`, best
    /// first; ties by catalog order. Skills with no matching token are not returned, except a skill
    /// whose name equals the query, which always comes first. Returns nothing if `catalog` is not
    /// the indexed one (a different number of skills).
    pub fn search(&self, catalog: &SkillCatalog, query: &str, limit: usize) -> Vec<SearchHit> {
        let skills = catalog.skills();
        if limit == 0 || skills.len() != self.lengths.len() {
            return Vec::new();
        }
        let wanted = name_hash(query);
        let normalized = normalize_name(query);
        let exact = self
            .name_hashes
            .iter()
            .enumerate()
            .filter(|(_, h)| **h == wanted)
            .map(|(i, _)| i)
            .find(|&i| normalize_name(&skills[i].name) == normalized);
        let n = self.lengths.len() as f32;
        let mut scores: HashMap<u32, f32> = HashMap::new();
        let mut seen: Vec<String> = Vec::new();
        for token in tokens(query) {
            if seen.contains(&token) {
                continue;
            }
            let Some(postings) = self.postings.get(token.as_str()) else {
                seen.push(token);
                continue;
            };
            let df = postings.len() as f32;
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for &(doc, tf) in postings {
                let tf = tf as f32;
                let len = self.lengths.get(doc as usize).copied().unwrap_or(1) as f32;
                let norm = K1 * (1.0 - B + B * len / self.average_length);
                *scores.entry(doc).or_default() += idf * tf * (K1 + 1.0) / (tf + norm);
            }
            seen.push(token);
        }
        let mut hits: Vec<(u32, f32)> = scores.into_iter().collect();
        if let Some(doc) = exact {
            let doc = u32::try_from(doc).unwrap_or(u32::MAX);
            hits.retain(|(d, _)| *d != doc);
            hits.push((doc, f32::INFINITY));
        }
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits.truncate(limit);
        hits.into_iter()
            .filter_map(|(doc, score)| {
                let name = skills.get(doc as usize)?.name.clone();
                Some(SearchHit {
                    index: doc as usize,
                    name,
                    score,
                })
            })
            .collect()
    }
}

fn normalize_name(name: &str) -> String {
    name.trim().to_lowercase()
}

fn name_hash(name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    // A fixed-key hasher: the same names hash the same in every process.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    normalize_name(name).hash(&mut hasher);
    hasher.finish()
}

/// True for characters of scripts written without spaces between words.
fn is_unspaced(c: char) -> bool {
    matches!(c as u32,
        0x0E00..=0x0EFF      // Thai, Lao
        | 0x1000..=0x109F    // Myanmar
        | 0x1780..=0x17FF    // Khmer
        | 0x3040..=0x30FF    // Hiragana, Katakana
        | 0x3100..=0x312F    // Bopomofo
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0x20000..=0x2FA1F) // CJK extensions B-F, compatibility supplement
}

/// The tokens of `text`, in order (see the module docs).
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut prev_unspaced: Option<char> = None;
    let flush = |word: &mut String, out: &mut Vec<String>| {
        if word.is_empty() {
            return;
        }
        if word.len() > 3 && word.ends_with('s') && !word.ends_with("ss") {
            word.pop();
        }
        out.push(std::mem::take(word));
    };
    for c in text.chars() {
        if is_unspaced(c) {
            flush(&mut word, &mut out);
            out.push(c.to_string());
            if let Some(p) = prev_unspaced {
                out.push(format!("{p}{c}"));
            }
            prev_unspaced = Some(c);
        } else if c.is_alphanumeric() {
            prev_unspaced = None;
            word.extend(c.to_lowercase());
        } else {
            prev_unspaced = None;
            flush(&mut word, &mut out);
        }
    }
    flush(&mut word, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer() {
        assert_eq!(
            tokens("Web-Research: PDFs and forms"),
            vec!["web", "research", "pdf", "and", "form"]
        );
        assert_eq!(
            tokens("会议准备"),
            vec!["会", "议", "会议", "准", "议准", "备", "准备"]
        );
        assert_eq!(tokens("class"), vec!["class"]);
    }
}
