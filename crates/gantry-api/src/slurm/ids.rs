//! Jobs as Slurm's commands name them: `12`, a range `12-15`, an array's element `45_3` or
//! elements `45_[1-3,7]` — an array's job id (its first element's, `SLURM_ARRAY_JOB_ID`)
//! alone names every element, as in Slurm — and the id Slurm shows for a job (`45_3`).

use super::SlurmArgError;
use crate::JobView;

/// The most jobs one range may name (`1-1000000000` is a typo, not a request).
pub const RANGE_MAX: u64 = 100_000;

/// One job (or every element of the array with that job id), or one element of an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobRef {
    Job(u64),
    Element { array: u64, index: u32 },
}

impl JobRef {
    /// Whether `job` is named by this.
    pub fn names(&self, job: &JobView) -> bool {
        let array = job.row.job.control.array.as_ref();
        match *self {
            JobRef::Job(id) => job.row.id == id || array.is_some_and(|a| a.job == Some(id)),
            JobRef::Element { array: id, index } => array.is_some_and(|a| a.job == Some(id) && a.index == index),
        }
    }
}

/// The id Slurm shows for `job`: `ARRAY_INDEX` for an array's element, else its own.
pub fn slurm_id(job: &JobView) -> String {
    match job.row.job.control.array.as_ref() {
        Some(a) if a.job.is_some() => format!("{}_{}", a.job.unwrap_or_default(), a.index),
        _ => job.row.id.to_string(),
    }
}

/// The job's name as Slurm shows it: an array element's is its array's (`sweep`, where
/// gantry names the element `sweep[3]`).
pub fn slurm_name(job: &JobView) -> String {
    job.row.job.control.array.as_ref().map_or_else(|| job.row.name.clone(), |a| a.array.clone())
}

/// Split at commas outside brackets (`45_[1,3],12` → `45_[1,3]`, `12`).
fn top_level(value: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut from) = (Vec::new(), 0i32, 0);
    for (i, c) in value.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&value[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&value[from..]);
    parts.into_iter().map(str::trim).filter(|p| !p.is_empty()).collect()
}

/// Job ids as `gantry cancel` and Slurm's commands take them: `3`, `3-5` or `1,3-5`, each
/// range bounded.
pub fn job_ids(text: &str) -> Result<Vec<u64>, SlurmArgError> {
    numbers("job id", text)
}

/// `3`, `3-5` or `1,3-5` as numbers, each range bounded.
fn numbers(option: &str, text: &str) -> Result<Vec<u64>, SlurmArgError> {
    let bad =
        || SlurmArgError::new(option, format!("{text:?} is not a job id, a range (12-15) or an array element (45_3)"));
    let mut out = Vec::new();
    for part in text.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b) = (a.trim().parse::<u64>().map_err(|_| bad())?, b.trim().parse::<u64>().map_err(|_| bad())?);
        if b < a || b - a >= RANGE_MAX {
            return Err(SlurmArgError::new(option, format!("{part}: a range of at most {RANGE_MAX} ids, low to high")));
        }
        out.extend(a..=b);
    }
    Ok(out)
}

/// The jobs a list names.
pub fn job_refs(option: &str, value: &str) -> Result<Vec<JobRef>, SlurmArgError> {
    let mut refs = Vec::new();
    for part in top_level(value) {
        match part.split_once('_') {
            Some((array, elements)) => {
                let array = numbers(option, array)?;
                let [array] = array[..] else {
                    return Err(SlurmArgError::new(option, format!("{part}: one array id before `_`")));
                };
                let inner = elements.strip_prefix('[').and_then(|e| e.strip_suffix(']')).unwrap_or(elements);
                for index in numbers(option, inner)? {
                    let index = u32::try_from(index)
                        .map_err(|_| SlurmArgError::new(option, format!("{part}: no such index")))?;
                    refs.push(JobRef::Element { array, index });
                }
            }
            None => refs.extend(numbers(option, part)?.into_iter().map(JobRef::Job)),
        }
    }
    Ok(refs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_ranges_and_array_elements_read_as_slurm_writes_them() {
        use JobRef::*;
        assert_eq!(job_refs("-j", "12").expect("id"), [Job(12)]);
        assert_eq!(job_refs("-j", "12-14,20").expect("range"), [Job(12), Job(13), Job(14), Job(20)]);
        assert_eq!(
            job_refs("-j", "45_[1-2,7],45_9").expect("elements"),
            [
                Element { array: 45, index: 1 },
                Element { array: 45, index: 2 },
                Element { array: 45, index: 7 },
                Element { array: 45, index: 9 }
            ]
        );
        for bad in ["x", "5-3", "1-1000000000", "45_x", "1-2_3", "45_99999999999"] {
            assert!(job_refs("-j", bad).is_err(), "{bad}");
        }
    }
}
