"""Development tools run from a checkout (CI's lint session), not installed with the
package."""
