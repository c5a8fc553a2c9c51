package fsm

import (
	"fmt"

	"github.com/limitd/limitd/persist"
)

// commandType is everything the state machine knows about one command type:
// how its payload decodes, whether and how a client may propose it, and how
// it is applied. Adding a command is one registerCommand call; there are no
// parallel switches to keep in step.
type commandType struct {
	name string
	// decode reads the payload after the type and version bytes into c,
	// reusing c's slices. Errors stick in d.
	decode func(c *command, d *decoder)
	// validate checks a decoded command proposed from outside the log (an
	// admin request). nil: clients may not propose this type.
	validate func(c *command) error
	// apply applies the decoded command. A returned error is fatal.
	apply func(a *applier, tx *persist.Tx, c *command) (interface{}, error)
}

// commands is indexed by the type byte: a lookup on the apply path is an
// array index, no map and no allocation.
var commands [256]*commandType

// registerCommand adds a command type to the table. Called from init only;
// a type registered twice or without decode or apply is a programming
// error.
func registerCommand(typ byte, ct commandType) {
	if commands[typ] != nil {
		panic(fmt.Sprintf("fsm: command type %d registered twice", typ))
	}
	if ct.decode == nil || ct.apply == nil || ct.name == "" {
		panic(fmt.Sprintf("fsm: command type %d needs a name, decode and apply", typ))
	}
	commands[typ] = &ct
}

func init() {
	registerCommand(CmdCheck, commandType{
		name: "check",
		decode: func(c *command, d *decoder) {
			c.now = d.varint()
			c.retention = d.varint()
			if v := d.byte(); d.err == nil && v != opsVersion {
				d.fail(fmt.Errorf("unknown ops version %d", v))
			}
			c.ops, c.checks = d.ops(c.ops[:0], c.checks[:0])
			c.bounds = d.bounds()
		},
		apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
			rs, err := a.check(tx, c)
			if err != nil {
				return nil, err
			}
			return rs, nil
		},
	})
	registerCommand(CmdPutPolicy, commandType{
		name: "put policy",
		decode: func(c *command, d *decoder) {
			c.policy, c.policyErr = decodePolicy(d)
		},
		validate: func(c *command) error {
			if c.policyErr != nil {
				return fmt.Errorf("%w: policy %q: %v", ErrBadCommand, c.policy.Name, c.policyErr)
			}
			if _, err := c.policy.Spec.Validate(); err != nil {
				return fmt.Errorf("%w: policy %q: %v", ErrBadCommand, c.policy.Name, err)
			}
			return nil
		},
		apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
			if c.policyErr != nil {
				return errResponse(fieldError(c.policyErr, "")), nil
			}
			old, _ := a.lookupPolicy([]byte(c.policy.Name)) // nil when absent
			e, err := a.putPolicy(tx, c.policy)
			if e != nil || err != nil {
				return errResponse(e), err
			}
			next, _ := a.lookupPolicy([]byte(c.policy.Name))
			return a.fencePolicy(tx, c.policy.Name, old, next) // leasefence.go
		},
	})
	registerCommand(CmdDeletePolicy, commandType{
		name:     "delete policy",
		decode:   decodeName,
		validate: func(*command) error { return nil },
		apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
			old, _ := a.lookupPolicy([]byte(c.name))
			e, err := a.deletePolicy(tx, c.name)
			if e != nil || err != nil {
				return errResponse(e), err
			}
			return a.fencePolicy(tx, c.name, old, nil) // leasefence.go
		},
	})
	registerCommand(CmdResetKey, commandType{
		name: "reset key",
		decode: func(c *command, d *decoder) {
			c.checks = append(c.checks[:0], d.check())
		},
		validate: func(c *command) error {
			if ck := c.checks[0]; len(ck.spec) > 0 {
				if _, err := decodeSpec(ck.spec); err != nil {
					return fmt.Errorf("%w: reset key: %v", ErrBadCommand, err)
				}
			}
			return nil
		},
		apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
			e, err := a.resetKey(tx, &c.checks[0])
			return errResponse(e), err
		},
	})
	registerCommand(CmdExpire, commandType{
		name: "expire",
		decode: func(c *command, d *decoder) {
			c.now = d.varint()
			m := d.uvarint()
			if m > 1<<31 {
				m = 1 << 31 // bounded work is the point of max
			}
			c.max = int(m)
		},
		apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
			now := clamp(tx, c.now)
			n, err := a.expire(tx, now, c.max)
			if err != nil {
				return nil, err
			}
			// Ends in leader time (DESIGN.md): list entries and bans ended
			// at the sweep's time leave the lists and the ban index.
			if err := a.pruneLists(tx, now); err != nil {
				return nil, err
			}
			a.f.bans.sweptAt(now)
			return n, nil
		},
	})
	registerCommand(CmdSetNode, commandType{
		name: "set node",
		decode: func(c *command, d *decoder) {
			c.name = string(d.bytes())
			c.addr = string(d.bytes())
		},
		apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
			if c.name == "" || len(c.name) > maxNodeField || len(c.addr) > maxNodeField {
				return nil, nil // not a node anyone can have; ignored on every replica alike
			}
			a.pendingNodes[c.name] = nodeChange{addr: c.addr}
			return nil, tx.PutNode(c.name, c.addr)
		},
	})
	registerCommand(CmdRemoveNode, commandType{
		name:   "remove node",
		decode: decodeName,
		apply: func(a *applier, tx *persist.Tx, c *command) (interface{}, error) {
			if c.name == "" || len(c.name) > maxNodeField {
				return nil, nil
			}
			a.pendingNodes[c.name] = nodeChange{deleted: true}
			return nil, tx.DeleteNode(c.name)
		},
	})
}

func decodeName(c *command, d *decoder) { c.name = string(d.bytes()) }
