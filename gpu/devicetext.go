package gpu

import (
	"fmt"
	"sort"
	"strings"
)

// DeviceText is every field of one GPU, a few lines for a person (the
// CLI's --devices view and the device check's output): what was read,
// then each field NVML did not answer with its reason.
func DeviceText(d DeviceState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "GPU %d %s %s %s: %s", d.Index, orDash(d.Name), orDash(d.UUID), orDash(d.PCIBusID), d.Signature)
	if d.Why != "" {
		fmt.Fprintf(&b, " (%s)", d.Why)
	}
	var load []string
	if u := d.Utilization; u != nil {
		load = append(load, fmt.Sprintf("util %d%% (memory %d%%)", u.GPU, u.Memory))
	}
	if d.MemoryUsed != nil && d.MemoryTotal != nil {
		load = append(load, fmt.Sprintf("memory %.1f of %.1f GiB", gib(*d.MemoryUsed), gib(*d.MemoryTotal)))
	}
	if d.PowerW != nil {
		p := fmt.Sprintf("power %.0f W", *d.PowerW)
		if d.PowerLimitW != nil {
			p += fmt.Sprintf(" of %.0f W", *d.PowerLimitW)
		}
		load = append(load, p)
	}
	if d.TempC != nil {
		load = append(load, fmt.Sprintf("%d °C", *d.TempC))
	}
	if d.ClockSMMHz != nil || d.ClockMemMHz != nil {
		load = append(load, fmt.Sprintf("clocks SM %s MHz, memory %s MHz", u32s(d.ClockSMMHz), u32s(d.ClockMemMHz)))
	}
	if d.ClockEventMask != nil {
		ev := "none"
		if len(d.ClockEvents) > 0 {
			ev = strings.Join(d.ClockEvents, ",")
		}
		load = append(load, fmt.Sprintf("clocks held by %s (mask %#x)", ev, *d.ClockEventMask))
	}
	line(&b, load)
	var health []string
	if e := d.ECC; e != nil {
		health = append(health, fmt.Sprintf("ECC volatile single %s double %s, aggregate single %s double %s",
			u64s(e.VolatileSingle), u64s(e.VolatileDouble), u64s(e.AggregateSingle), u64s(e.AggregateDouble)))
	}
	if r := d.RemappedRows; r != nil {
		health = append(health, fmt.Sprintf("rows remapped: correctable %d, uncorrectable %d, pending %s, failure %s",
			r.Correctable, r.Uncorrectable, yesNo(r.Pending), yesNo(r.Failure)))
	}
	if d.NVLinkActive > 0 || len(d.NVLink) > 0 {
		var errs []string
		for _, l := range d.NVLink {
			if l.Errors() > 0 || l.Missing != "" {
				errs = append(errs, linkText(l))
			}
		}
		s := fmt.Sprintf("NVLink %d active", d.NVLinkActive)
		if len(errs) == 0 {
			s += ", no errors"
		} else {
			s += ", " + strings.Join(errs, "; ")
		}
		health = append(health, s)
	}
	if m := d.MIG; m != nil {
		s := "MIG off"
		if m.Enabled {
			s = fmt.Sprintf("MIG on, %d devices", len(m.Devices))
		}
		if m.Pending {
			s += " (a mode change is pending a GPU reset)"
		}
		health = append(health, s)
	}
	line(&b, health)
	if len(d.Processes) > 0 {
		var ps []string
		for _, p := range d.Processes {
			who := "no rank"
			if p.Rank >= 0 {
				who = fmt.Sprintf("rank %d", p.Rank)
			}
			s := fmt.Sprintf("pid %d %s %.1f GiB", p.PID, who, gib(p.UsedMemory))
			if p.GPUInstance >= 0 {
				s += fmt.Sprintf(" (MIG instance %d)", p.GPUInstance)
			}
			if p.RankWhy != "" {
				s += " (" + p.RankWhy + ")"
			}
			ps = append(ps, s)
		}
		if d.ProcessesCut > 0 {
			ps = append(ps, fmt.Sprintf("%d more processes not listed", d.ProcessesCut))
		}
		b.WriteString("\n  processes: " + strings.Join(ps, "; "))
	}
	if len(d.Missing) > 0 {
		keys := make([]string, 0, len(d.Missing))
		for k := range d.Missing {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var ms []string
		for _, k := range keys {
			ms = append(ms, k+": "+d.Missing[k])
		}
		b.WriteString("\n  not read: " + strings.Join(ms, "; "))
	}
	return b.String()
}

func line(b *strings.Builder, parts []string) {
	if len(parts) > 0 {
		b.WriteString("\n  " + strings.Join(parts, ", "))
	}
}

func gib(v uint64) float64 { return float64(v) / (1 << 30) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func u32s(p *uint32) string {
	if p == nil {
		return "?"
	}
	return fmt.Sprint(*p)
}

func u64s(p *uint64) string {
	if p == nil {
		return "?"
	}
	return fmt.Sprint(*p)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
