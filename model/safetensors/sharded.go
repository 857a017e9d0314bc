package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/gosling-ai/gosling/tensor"
)

// IndexFile is the conventional name of a sharded checkpoint's index.
const IndexFile = "model.safetensors.index.json"

// Sharded is a checkpoint split over several files by an index
// ({"weight_map": {tensor name: shard file name}}). Each shard is mapped
// once. It satisfies model.WeightSource.
type Sharded struct {
	IndexPath string
	Shards    []*File // in the order of their first appearance in the index

	owner map[string]*File
	names []string
}

// OpenIndex reads an index file and opens every shard it names, which must
// lie in the index's directory.
func OpenIndex(indexPath string) (*Sharded, error) {
	data, err := os.ReadFile(indexPath)
	if err != nil {
		return nil, fmt.Errorf("open safetensors index: %w", err)
	}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &index); err != nil {
		return nil, fmt.Errorf("safetensors index %s is not valid JSON: %v", indexPath, err)
	}
	if len(index.WeightMap) == 0 {
		return nil, fmt.Errorf("safetensors index %s has no weight_map entries", indexPath)
	}

	// Sort the names so that shards open, and errors surface, in the same
	// order on every run.
	mapped := make([]string, 0, len(index.WeightMap))
	for name := range index.WeightMap {
		mapped = append(mapped, name)
	}
	slices.Sort(mapped)

	s := &Sharded{IndexPath: indexPath, owner: map[string]*File{}}
	dir := filepath.Dir(indexPath)
	byShard := map[string]*File{}
	for _, name := range mapped {
		shard := index.WeightMap[name]
		f, seen := byShard[shard]
		if !seen {
			if !filepath.IsLocal(shard) || filepath.Base(shard) != shard {
				s.Close()
				return nil, fmt.Errorf("safetensors index %s: shard %q of tensor %s must be a file name in the index's directory", indexPath, shard, name)
			}
			if f, err = Open(filepath.Join(dir, shard)); err != nil {
				s.Close()
				return nil, fmt.Errorf("safetensors index %s: %w", indexPath, err)
			}
			byShard[shard] = f
			s.Shards = append(s.Shards, f)
		}
		if !f.Has(name) {
			s.Close()
			return nil, fmt.Errorf("safetensors index %s maps tensor %s to %s, which does not contain it", indexPath, name, f.Path)
		}
		s.owner[name] = f
	}
	// Tensors a shard holds but the index omits are still served: the index
	// is a lookup aid, the shards are the truth.
	for _, f := range s.Shards {
		for _, name := range f.names {
			if _, ok := s.owner[name]; !ok {
				s.owner[name] = f
			}
		}
	}
	for name := range s.owner {
		s.names = append(s.names, name)
	}
	slices.Sort(s.names)
	return s, nil
}

// Tensor returns the named tensor from the shard that holds it.
func (s *Sharded) Tensor(name string) (tensor.Weight, error) {
	f, ok := s.owner[name]
	if !ok {
		paths := make([]string, len(s.Shards))
		for i, sh := range s.Shards {
			paths[i] = sh.Path
		}
		return tensor.Weight{}, fmt.Errorf("tensor %s not found in %s (index %s)", name, describe(paths), s.IndexPath)
	}
	return f.Tensor(name)
}

// Raw returns the named tensor as stored, from the shard that holds it.
func (s *Sharded) Raw(name string) (Raw, error) {
	f, ok := s.owner[name]
	if !ok {
		return Raw{}, fmt.Errorf("tensor %s not found (index %s)", name, s.IndexPath)
	}
	return f.Raw(name)
}

// Has reports whether any shard holds the named tensor.
func (s *Sharded) Has(name string) bool {
	_, ok := s.owner[name]
	return ok
}

// Names lists every tensor of every shard, sorted.
func (s *Sharded) Names() []string { return slices.Clone(s.names) }

// Close unmaps every shard.
func (s *Sharded) Close() error {
	var errs []error
	for _, f := range s.Shards {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
