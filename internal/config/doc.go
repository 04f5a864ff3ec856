// Package config owns Usher's configuration: the one YAML file, its
// defaults, the USHER_<SECTION>_<KEY> environment overrides, and validation
// that reports every problem at once, by key name.
package config
