//! Which characters a name may hold and a terminal may be sent: the one rule the spec reader
//! checks names by and every listing escapes stored text by. And node names as Slurm lists
//! them (its hostlist form), for the variables tasks see and the Slurm commands' output.

/// Printable: not a control character, not a line or paragraph separator, and none of
/// Unicode's default-ignorable code points (DerivedCoreProperties.txt, Unicode 15.1: soft
/// hyphen, joiners, fillers, variation selectors, tags — characters a terminal draws as
/// nothing) nor its bidirectional controls (PropList.txt `Bidi_Control`: the marks, embeddings,
/// overrides and isolates that reorder what is shown around them). A name with one would look
/// like another name, or make a listing lie.
pub fn printable(c: char) -> bool {
    !c.is_control() && !matches!(c, '\u{2028}' | '\u{2029}') && !default_ignorable(c)
}

/// Unicode's `Default_Ignorable_Code_Point` (which holds every `Bidi_Control` but U+061C's
/// neighbours as well: 061C, 200E–200F, 202A–202E, 2066–2069 are all in it).
fn default_ignorable(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFF8}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

/// Node names in Slurm's hostlist form: names that differ only in a trailing number of the
/// same width, consecutive, as `prefix[first-last]` (`n[1-3],gpu-a`); order kept.
pub fn hostlist(nodes: &[String]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < nodes.len() {
        let Some((prefix, digits)) = numbered(&nodes[i]) else {
            parts.push(nodes[i].clone());
            i += 1;
            continue;
        };
        let first: u64 = digits.parse().unwrap_or(0);
        let mut j = i + 1;
        while j < nodes.len()
            && numbered(&nodes[j]).is_some_and(|(p, d)| {
                p == prefix && d.len() == digits.len() && d.parse::<u64>().ok() == Some(first + (j - i) as u64)
            })
        {
            j += 1;
        }
        if j - i == 1 {
            parts.push(nodes[i].clone());
        } else {
            let last = &numbered(&nodes[j - 1]).expect("numbered").1;
            parts.push(format!("{prefix}[{digits}-{last}]"));
        }
        i = j;
    }
    parts.join(",")
}

/// A name's prefix and trailing digits, if it ends in some (and is not only digits).
fn numbered(name: &str) -> Option<(&str, &str)> {
    let cut = name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    (cut > 0 && cut < name.len() && name.len() - cut <= 18).then(|| name.split_at(cut))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn node_lists_read_as_slurm_writes_them() {
        assert_eq!(hostlist(&names(&["n1", "n2", "n3"])), "n[1-3]");
        assert_eq!(hostlist(&names(&["n1", "n3"])), "n1,n3");
        assert_eq!(hostlist(&names(&["gpu-07", "gpu-08", "gpu-10", "login"])), "gpu-[07-08],gpu-10,login");
        assert_eq!(hostlist(&names(&["a9", "a10"])), "a9,a10");
        assert_eq!(hostlist(&names(&["vm"])), "vm");
        assert_eq!(hostlist(&[]), "");
    }
}
