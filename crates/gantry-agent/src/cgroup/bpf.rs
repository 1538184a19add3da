//! The cgroup v2 device rule: a small BPF program (type `CGROUP_DEVICE`) attached to a task's
//! cgroup, which the kernel runs on every `open` or `mknod` of a device node by a process in
//! it. cgroup v2 has no `devices.deny` file; this is how runc, crun and systemd's `DeviceAllow=`
//! do the same job. The program is a handful of comparisons, written here as raw instructions
//! (no compiler, no object file): block devices and character devices that are not GPU-like
//! pass; `/dev/nvidia*` (major 195) passes only for `nvidiactl` and the task's own GPU minors;
//! the `nvidia-caps` major only for the task's MIG capability minors.
//!
//! The second module of the workspace that may use `unsafe`: two `bpf(2)` calls
//! (`BPF_PROG_LOAD`, `BPF_PROG_ATTACH`) with structs laid out as the kernel's `union bpf_attr`,
//! each with a `// SAFETY:` note. Program and attachment are tested against the kernel on this
//! machine's cgroup2 mount (`tests` below and the agent's confinement tests).

#![allow(unsafe_code)]

use super::devices::{Allowed, NVIDIA_MAJOR, NVIDIACTL_MINOR};
use crate::error::DeviceError;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// One BPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    code: u8,
    /// dst register in the low nibble, src in the high one.
    regs: u8,
    off: i16,
    imm: i32,
}

// Opcodes used (linux/bpf_common.h, linux/bpf.h).
const LDX_MEM_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const ALU64_AND_K: u8 = 0x57; // BPF_ALU64 | BPF_AND | BPF_K
const ALU64_MOV_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
const JMP_JEQ_K: u8 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JMP_JNE_K: u8 = 0x55; // BPF_JMP | BPF_JNE | BPF_K
const JMP_JA: u8 = 0x05; // BPF_JMP | BPF_JA
const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT

/// `BPF_DEVCG_DEV_CHAR`: the low 16 bits of `access_type` say block (1) or char (2).
const DEV_CHAR: i32 = 2;

/// The most comparisons one program makes: a task's GPUs and MIG capabilities (a node has at
/// most a few dozen); the kernel's own limit is 4,096 instructions for this program type.
pub const ALLOWED_MINORS_MAX: usize = 1024;

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, regs: (src << 4) | (dst & 0x0f), off, imm }
}

/// A jump whose target is a label, resolved once the program is laid out.
enum Jump {
    /// Compare `reg` with `imm`: jump when equal (`eq`) or not equal.
    If {
        reg: u8,
        imm: i32,
        eq: bool,
        to: Label,
    },
    Always(Label),
    Plain(Insn),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    Allow,
    Deny,
    Nvidia,
    Caps,
}

/// The device program for a task allowed `allowed`, the `nvidia-caps` major being `caps`.
pub fn program(allowed: &Allowed, caps: Option<u32>) -> Vec<Insn> {
    use Label::*;
    let imm = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
    // r1: struct bpf_cgroup_dev_ctx { u32 access_type; u32 major; u32 minor; }
    let mut body = vec![
        Jump::Plain(insn(LDX_MEM_W, 2, 1, 0, 0)),
        Jump::Plain(insn(ALU64_AND_K, 2, 0, 0, 0xffff)),
        Jump::Plain(insn(LDX_MEM_W, 3, 1, 4, 0)),
        Jump::Plain(insn(LDX_MEM_W, 4, 1, 8, 0)),
        Jump::If { reg: 2, imm: DEV_CHAR, eq: false, to: Allow },
        Jump::If { reg: 3, imm: imm(NVIDIA_MAJOR), eq: true, to: Nvidia },
    ];
    if let Some(major) = caps {
        body.push(Jump::If { reg: 3, imm: imm(major), eq: true, to: Caps });
    }
    body.push(Jump::Always(Allow));
    let mut labels: Vec<(Label, usize)> = vec![(Nvidia, body.len())];
    body.push(Jump::If { reg: 4, imm: imm(NVIDIACTL_MINOR), eq: true, to: Allow });
    body.extend(allowed.gpu_minors.iter().map(|&m| Jump::If { reg: 4, imm: imm(m), eq: true, to: Allow }));
    body.push(Jump::Always(Deny));
    labels.push((Caps, body.len()));
    body.extend(allowed.caps_minors.iter().map(|&m| Jump::If { reg: 4, imm: imm(m), eq: true, to: Allow }));
    body.push(Jump::Always(Deny));
    labels.push((Allow, body.len()));
    body.push(Jump::Plain(insn(ALU64_MOV_K, 0, 0, 0, 1)));
    body.push(Jump::Plain(insn(EXIT, 0, 0, 0, 0)));
    labels.push((Deny, body.len()));
    body.push(Jump::Plain(insn(ALU64_MOV_K, 0, 0, 0, 0)));
    body.push(Jump::Plain(insn(EXIT, 0, 0, 0, 0)));
    let at = |label: Label| labels.iter().find(|(l, _)| *l == label).map(|(_, at)| *at).expect("every label is placed");
    body.iter()
        .enumerate()
        .map(|(pc, j)| {
            let off = |to: Label| i16::try_from(at(to) as i64 - pc as i64 - 1).expect("a short program");
            match *j {
                Jump::Plain(i) => i,
                Jump::If { reg, imm, eq, to } => insn(if eq { JMP_JEQ_K } else { JMP_JNE_K }, reg, 0, off(to), imm),
                Jump::Always(to) => insn(JMP_JA, 0, 0, off(to), 0),
            }
        })
        .collect()
}

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;

/// `union bpf_attr` for `BPF_PROG_LOAD`, up to `expected_attach_type` (the kernel reads a
/// shorter struct and takes the fields after it as zero).
#[repr(C)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `union bpf_attr` for `BPF_PROG_ATTACH`.
#[repr(C)]
struct ProgAttach {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

/// Load `insns` as a device program: its descriptor, or the verifier's words.
fn load(insns: &[Insn]) -> Result<OwnedFd, String> {
    let license = c"GPL";
    let mut log = vec![0u8; 64 * 1024];
    let mut name = [0u8; 16];
    name[..14].copy_from_slice(b"gantry_devices");
    let attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: u32::try_from(insns.len()).map_err(|_| "program too long".to_string())?,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        kern_version: 0,
        prog_flags: 0,
        prog_name: name,
        prog_ifindex: 0,
        expected_attach_type: BPF_CGROUP_DEVICE,
    };
    // SAFETY: `attr` is a `union bpf_attr` prefix laid out as the kernel's (repr(C), the
    // sizes and order of linux/bpf.h); the pointers in it (instructions, license, log) are
    // valid for the whole call and sized as said; the kernel copies the program and writes at
    // most `log_size` bytes of log.
    let fd = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_PROG_LOAD, &attr as *const ProgLoad, std::mem::size_of::<ProgLoad>())
    };
    if fd < 0 {
        let errno = std::io::Error::last_os_error();
        let words = String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap_or(0)]).trim().to_string();
        return Err(if words.is_empty() {
            format!("bpf(PROG_LOAD): {errno}")
        } else {
            format!("bpf(PROG_LOAD): {errno}: {words}")
        });
    }
    // SAFETY: a non-negative return of BPF_PROG_LOAD is a new descriptor this process owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Attach `program` to the cgroup open at `cgroup` (a directory of the cgroup2 mount).
fn attach(cgroup: &OwnedFd, program: &OwnedFd) -> Result<(), String> {
    let attr = ProgAttach {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_bpf_fd: program.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: 0,
        replace_bpf_fd: 0,
    };
    // SAFETY: `attr` is the kernel's attach layout; both descriptors are open for the call.
    let rc = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_PROG_ATTACH, &attr as *const ProgAttach, std::mem::size_of::<ProgAttach>())
    };
    if rc < 0 {
        return Err(format!("bpf(PROG_ATTACH): {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Confine the cgroup at `dir` (cgroup v2) to `allowed`: load the program and attach it. The
/// attachment lasts as long as the cgroup (the program's descriptor is closed here).
pub fn confine(dir: &std::path::Path, allowed: &Allowed, caps: Option<u32>) -> Result<(), DeviceError> {
    let at = dir.display().to_string();
    if allowed.gpu_minors.len() + allowed.caps_minors.len() > ALLOWED_MINORS_MAX {
        return Err(DeviceError::new(at, format!("more than {ALLOWED_MINORS_MAX} device minors for one task")));
    }
    let program = load(&program(allowed, caps)).map_err(|e| DeviceError::new("bpf(PROG_LOAD)", e))?;
    let cgroup: OwnedFd = std::fs::File::open(dir).map_err(|e| DeviceError::new(&at, format!("{at}: {e}")))?.into();
    attach(&cgroup, &program).map_err(|e| DeviceError::new("bpf(PROG_ATTACH)", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run the program over one device the way the kernel would (an interpreter of the few
    /// opcodes it uses), so the logic is tested without a kernel.
    fn verdict(p: &[Insn], char_dev: bool, major: u32, minor: u32) -> bool {
        let mut r = [0i64; 11];
        let ctx = [if char_dev { 2 | (7 << 16) } else { 1 | (7 << 16) }, major as i64, minor as i64];
        let mut pc = 0usize;
        loop {
            let i = p[pc];
            let (dst, src) = (usize::from(i.regs & 0x0f), usize::from(i.regs >> 4));
            pc += 1;
            match i.code {
                LDX_MEM_W => r[dst] = ctx[(i.off / 4) as usize + (src - 1)],
                ALU64_AND_K => r[dst] &= i64::from(i.imm),
                ALU64_MOV_K => r[dst] = i64::from(i.imm),
                JMP_JEQ_K if r[dst] == i64::from(i.imm) => pc = (pc as i64 + i64::from(i.off)) as usize,
                JMP_JNE_K if r[dst] != i64::from(i.imm) => pc = (pc as i64 + i64::from(i.off)) as usize,
                JMP_JEQ_K | JMP_JNE_K => {}
                JMP_JA => pc = (pc as i64 + i64::from(i.off)) as usize,
                EXIT => return r[0] == 1,
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    use super::super::devices::DeviceRules;
    use proptest::prelude::*;

    /// A node of `gpus` fake GPUs and a task granted some of them, whole or as a MIG
    /// instance: the BPF program (v2) and the `devices.deny` lines (v1) agree on every GPU and
    /// MIG-capability device, the task's own always open, every other one always refused.
    fn both_rules_agree(gpus: u32, whole: Vec<u32>, mig: Vec<(u32, u8)>) -> Result<(), TestCaseError> {
        let node: Vec<(u32, String)> = (0..gpus).map(|i| (i, format!("GPU-{i}"))).collect();
        let rules = DeviceRules::fake(&node);
        let Some(caps) = rules.caps_major() else { return Ok(()) };
        let mut devices: Vec<String> = whole.iter().filter(|&&g| g < gpus).map(|g| format!("GPU-{g}")).collect();
        devices.extend(mig.iter().filter(|(g, _)| *g < gpus).map(|(g, start)| format!("MIG-{g}-1g.10gb-{start}")));
        let allowed = rules.allowed(&devices, |_, _| None);
        let denied = rules.v1_denials(&allowed);
        let p = program(&allowed, Some(caps));
        let cases = (0..=255u32).map(|m| (195, m)).chain(rules.all_caps_minors().into_iter().map(|m| (caps, m)));
        for (major, minor) in cases {
            let v1_denies = denied.contains(&format!("c {major}:{minor} rwm"));
            prop_assert_eq!(verdict(&p, true, major, minor), !v1_denies, "c {}:{}", major, minor);
            let own = (major == 195 && allowed.gpu_minors.contains(&minor))
                || (major == caps && allowed.caps_minors.contains(&minor));
            prop_assert_eq!(own || (major == 195 && minor == 255), !v1_denies, "c {}:{}", major, minor);
        }
        for &g in whole.iter().filter(|&&g| g < gpus) {
            prop_assert!(verdict(&p, true, 195, g), "a granted GPU opens");
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn the_v1_and_v2_device_rules_agree_and_hold_a_task_to_its_own(
            gpus in 1u32..=16,
            whole in proptest::collection::vec(0u32..16, 0..4),
            mig in proptest::collection::vec((0u32..16, 0u8..8), 0..3),
        ) {
            both_rules_agree(gpus, whole, mig)?;
        }
    }

    #[test]
    fn the_program_allows_its_gpus_and_every_other_device() {
        let allowed = Allowed { gpu_minors: [2].into(), caps_minors: [17].into() };
        let p = program(&allowed, Some(240));
        assert!(verdict(&p, true, 195, 2), "its GPU");
        assert!(verdict(&p, true, 195, 255), "nvidiactl");
        assert!(!verdict(&p, true, 195, 0), "another GPU");
        assert!(!verdict(&p, true, 195, 254), "nvidia-modeset");
        assert!(verdict(&p, true, 240, 17), "its MIG capability");
        assert!(!verdict(&p, true, 240, 1), "MIG config");
        assert!(verdict(&p, true, 1, 3), "/dev/null");
        assert!(verdict(&p, false, 195, 0), "a block device 195:0 is not a GPU");
        let none = program(&Allowed::default(), None);
        assert!(!verdict(&none, true, 195, 0) && verdict(&none, true, 195, 255) && verdict(&none, true, 240, 1));
    }
}
