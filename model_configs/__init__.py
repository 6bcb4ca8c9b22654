"""Everything about models before they run: catalog, config resolution, shrinking, inputs."""
