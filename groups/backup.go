package groups

import (
	"context"

	"github.com/limitd/limitd/cluster/backup"
	"github.com/limitd/limitd/nodeapi"
)

// OpenBackup is the backup of every group (service.Backuper): one archive
// (cluster/backup.Archive) with a manifest naming the slot map's epoch and
// each group's index, term, slots and digest. Each group's part is that
// group's backup as a one-group node takes it (on its leader, after a
// barrier). The groups are not frozen together: a key lives in one group,
// so each part is consistent for its keys, at its own index.
func (h *Host) OpenBackup(ctx context.Context) (nodeapi.Backup, error) {
	d := h.data.Load()
	if d == nil {
		return nil, errNotOpen
	}
	runs := d.rec.slots.Runs()
	var parts []backup.ArchivePart
	add := func(g uint32, b nodeapi.Backup) {
		p := backup.ArchivePart{ID: g, Backup: b, Slots: [][2]uint16{}}
		for _, r := range runs {
			if r.Group == g {
				p.Slots = append(p.Slots, [2]uint16{uint16(r.First), uint16(r.Last)})
			}
		}
		parts = append(parts, p)
	}
	b0, err := h.zero.Backups().OpenBackup(ctx)
	if err != nil {
		return nil, err
	}
	add(0, b0)
	for i, n := range d.nodes {
		b, err := n.Backups().OpenBackup(ctx)
		if err != nil {
			for _, p := range parts {
				p.Backup.Close()
			}
			return nil, err
		}
		add(uint32(i+1), b)
	}
	a, err := backup.NewArchive(h.cfg.Base.DataDir, h.zero.ID(), d.rec.slots.Epoch, parts)
	if err != nil {
		return nil, err
	}
	return a, nil
}
