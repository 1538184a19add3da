//! Slurm's hostlists (`gpu[01-04,08]-ib,login`): expanded, bounded, with what is wrong named.
//! Read by the slurm.conf import, its partitions' `Nodes=`, and the Slurm commands
//! (`scontrol show hostnames`, a step's node list).

/// Most nodes one hostlist may expand to.
pub const HOSTLIST_MAX: usize = 100_000;

/// `gpu[01-04,08]-ib` → gpu01-ib … gpu04-ib, gpu08-ib (several bracket groups multiply; the
/// zero padding of a range's first number is kept). Commas outside brackets separate names.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for part in split_outside(list, '[', ']') {
        let mut expanded = vec![String::new()];
        let mut rest = part.as_str();
        while !rest.is_empty() {
            match rest.find('[') {
                None if rest.contains(']') => return Err(format!("{part:?}: a ']' without '['")),
                None => {
                    expanded.iter_mut().for_each(|n| n.push_str(rest));
                    rest = "";
                }
                Some(open) => {
                    let close = rest[open..].find(']').ok_or_else(|| format!("{part:?}: a '[' without ']'"))? + open;
                    let prefix = &rest[..open];
                    let values = range_values(&rest[open + 1..close]).map_err(|e| format!("{part:?}: {e}"))?;
                    let mut next = Vec::with_capacity(expanded.len() * values.len());
                    for n in &expanded {
                        for v in &values {
                            next.push(format!("{n}{prefix}{v}"));
                        }
                    }
                    if next.len() > HOSTLIST_MAX {
                        return Err(format!("{part:?} expands to more than {HOSTLIST_MAX} names"));
                    }
                    expanded = next;
                    rest = &rest[close + 1..];
                }
            }
        }
        names.extend(expanded);
        if names.len() > HOSTLIST_MAX {
            return Err(format!("the list expands to more than {HOSTLIST_MAX} names"));
        }
    }
    Ok(names)
}

/// `list` split at commas that are not inside `open`…`close` (`gpu[01-02],login`;
/// `gpu:a100:8(S:0-1),shard:16`).
pub(crate) fn split_outside(list: &str, open: char, close: char) -> Vec<String> {
    let (mut parts, mut current, mut depth) = (Vec::new(), String::new(), 0);
    for c in list.chars() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
        } else if c == ',' && depth == 0 {
            parts.push(std::mem::take(&mut current));
            continue;
        }
        current.push(c);
    }
    parts.push(current);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// `01-04,08` → ["01", "02", "03", "04", "08"].
fn range_values(spec: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for item in spec.split(',') {
        match item.split_once('-') {
            Some((a, b)) => {
                let width = a.len();
                let (a, b): (u64, u64) = (
                    a.parse().map_err(|_| format!("{a:?} is not a number"))?,
                    b.parse().map_err(|_| format!("{b:?} is not a number"))?,
                );
                if b < a || b - a >= HOSTLIST_MAX as u64 {
                    return Err(format!("range {item:?} is backwards or too long"));
                }
                out.extend((a..=b).map(|v| format!("{v:0width$}")));
            }
            None => out.push(item.to_string()),
        }
    }
    Ok(out)
}
