package fsm

import "fmt"

// ValidateCommand checks a command that arrives from outside the log (an
// admin request, possibly forwarded by another node) before it is proposed.
// Only policy and key-reset commands may be proposed that way, and they must
// decode completely and carry valid limits: nothing a client sends may reach
// the log in a form that would stop the state machine.
func ValidateCommand(b []byte) error {
	var c command
	if err := decodeCommand(&c, b); err != nil {
		return err
	}
	switch c.typ {
	case CmdPutPolicy:
		if c.policyErr != nil {
			return fmt.Errorf("%w: policy %q: %v", ErrBadCommand, c.policy.Name, c.policyErr)
		}
		if _, err := c.policy.Spec.Validate(); err != nil {
			return fmt.Errorf("%w: policy %q: %v", ErrBadCommand, c.policy.Name, err)
		}
	case CmdDeletePolicy:
	case CmdPutDomain, CmdDeleteDomain:
		return validateDomain(&c)
	case CmdResetKey:
		if ck := c.checks[0]; len(ck.spec) > 0 {
			if _, err := decodeSpec(ck.spec); err != nil {
				return fmt.Errorf("%w: reset key: %v", ErrBadCommand, err)
			}
		}
	default:
		return fmt.Errorf("%w: type %d may not be proposed by a client", ErrBadCommand, c.typ)
	}
	return nil
}
