//! The conformance suite: every `Filesystem` behaviour of the contract as
//! one `pub async fn case(fs: &dyn Filesystem)` per behaviour.
//!
//! Each case starts from an empty workspace, acts once, and asserts the
//! outcome; a failure case asserts the error's reason and that the workspace
//! is unchanged ([`support::snapshot`]). Cases know nothing of the backend
//! or transport, so the same code checks the memory and directory backends
//! in-process and both of them through the gRPC client.
//!
//! [`conformance_suite!`](crate::conformance_suite) turns the list of cases
//! into one `#[tokio::test]` each, given a factory for fresh workspaces.
//! Adding a case means writing the function and naming it in that macro's
//! list; a unit test below fails when a case is missing from the list.
//!
//! Paths reach the trait already canonical, so path parsing (escapes, NUL,
//! length limits) is tested at the gRPC edge, in `tests/grpc_edges.rs`.

pub mod support;

pub mod attributes;
pub mod concurrency;
pub mod delete;
pub mod edit;
pub mod glob;
pub mod grep;
pub mod list;
pub mod mkdir;
pub mod patch;
pub mod read;
pub mod read_bytes;
pub mod stat;
pub mod symlinks;
pub mod transfer;
pub mod write;
pub mod write_bytes;

/// Expands to one `#[tokio::test]` per conformance case, grouped in one
/// module per operation (`read::empty_file_has_no_lines`, ...).
///
/// `$factory` is an expression evaluated afresh in every test; it must be a
/// future whose output derefs to `dyn wsfs::Filesystem` (a
/// [`Fixture`](crate::fixture::Fixture)) and keeps whatever the workspace
/// needs alive until the test ends. Expand it once per backend, each in its
/// own module:
///
/// ```ignore
/// mod memory {
///     wsfs_tests::conformance_suite!(wsfs_tests::harness::memory());
/// }
/// ```
///
/// `conformance_suite!(@names)` is the list of case names, `module::case`.
#[macro_export]
macro_rules! conformance_suite {
    (@names) => {
        $crate::conformance_suite!(@cases names ())
    };
    (@cases $mode:ident $args:tt) => {
        $crate::conformance_suite! { @$mode $args
            read {
                final_newline_does_not_start_a_line,
                empty_file_has_no_lines,
                last_line_without_newline_counts,
                crlf_line_endings_are_kept,
                default_limit_is_2000_lines,
                no_limit_reads_the_whole_file,
                offset_and_limit_select_lines,
                offset_past_the_end_is_clamped,
                pages_concatenate_to_the_file,
                invalid_utf8_is_not_text,
                reading_a_directory_is_is_a_directory,
                reading_a_missing_file_is_file_not_found,
                page_carries_path_size_and_version,
                whole_file_larger_than_four_mib_round_trips,
            }
            read_bytes {
                header_carries_size_and_version,
                offset_and_limit_select_a_range,
                no_limit_reads_to_the_end,
                limit_past_the_end_stops_at_the_end,
                chunks_respect_the_chunk_size,
                default_chunk_size_is_64_kib,
                chunks_concatenate_to_the_file,
                one_byte_chunks_cover_a_range,
                offset_at_the_end_yields_no_bytes,
                empty_file_yields_no_bytes,
                offset_past_the_end_is_out_of_range,
                every_byte_value_round_trips,
                missing_file_is_file_not_found,
                directory_is_is_a_directory,
                open_stream_keeps_reading_the_old_version,
            }
            write {
                overwrite_creates_a_missing_file,
                overwrite_replaces_the_content,
                create_writes_a_missing_file,
                create_over_an_existing_file_is_already_exists,
                append_adds_to_the_end,
                append_creates_a_missing_file,
                parents_are_created_by_default,
                without_create_parents_a_missing_parent_is_file_not_found,
                parent_that_is_a_file_is_not_a_directory,
                writing_over_a_directory_is_is_a_directory,
                writing_the_root_is_invalid_argument,
                version_grows_with_every_change,
                version_grows_across_delete_and_recreate,
                matching_if_version_writes,
                stale_if_version_is_version_mismatch,
                if_version_zero_creates_a_missing_file,
                if_version_zero_on_an_existing_file_is_version_mismatch,
                nonzero_if_version_on_a_missing_file_is_version_mismatch,
            }
            write_bytes {
                chunks_are_joined_in_order,
                empty_upload_creates_an_empty_file,
                append_mode_adds_to_the_end,
                broken_upload_leaves_the_old_content,
                broken_upload_creates_nothing,
                stale_if_version_is_version_mismatch,
                matching_if_version_writes,
                create_mode_over_an_existing_file_is_already_exists,
                upload_over_the_write_limit_is_too_large,
            }
            edit {
                single_match_is_replaced,
                absent_text_is_no_match,
                repeated_text_is_ambiguous_match_with_count,
                replace_all_replaces_every_match,
                dry_run_changes_nothing_but_returns_the_diff,
                diff_is_unified,
                matching_if_version_edits,
                stale_if_version_is_version_mismatch,
                binary_file_is_not_text,
                missing_file_is_file_not_found,
                multibyte_text_is_replaced_exactly,
                a_long_diff_is_cut_at_a_line,
                old_or_new_text_over_the_limit_is_too_large,
            }
            delete {
                file_is_removed,
                empty_directory_is_removed,
                non_empty_directory_without_recursive_is_directory_not_empty,
                recursive_counts_files_and_directories,
                recursive_delete_of_the_root_empties_it_and_keeps_it,
                allow_missing_makes_a_missing_path_a_no_op,
                missing_path_is_file_not_found,
                stale_if_version_is_version_mismatch,
                matching_if_version_deletes,
                delete_many_runs_each_entry_in_order_and_reports_each,
                delete_many_of_nothing_is_nothing,
                delete_many_over_the_entry_limit_deletes_nothing,
            }
            mkdir {
                parents_are_created_by_default,
                existing_directory_is_fine_by_default,
                existing_directory_without_exist_ok_is_already_exists,
                file_in_the_way_is_already_exists,
                missing_parent_without_parents_is_file_not_found,
                file_as_parent_is_not_a_directory,
            }
            transfer {
                move_file,
                move_directory_with_its_contents,
                copy_file,
                copy_directory_with_its_contents,
                move_onto_an_existing_file_is_already_exists,
                copy_onto_an_existing_file_is_already_exists,
                move_with_overwrite_replaces_the_destination,
                copy_with_overwrite_replaces_the_destination,
                move_into_itself_is_invalid_argument,
                copy_into_itself_is_invalid_argument,
                overwriting_an_ancestor_of_the_source_is_invalid_argument,
                move_of_a_missing_source_is_file_not_found,
                copy_of_a_missing_source_is_file_not_found,
                destination_parents_are_created_by_default,
                without_create_parents_a_missing_parent_is_file_not_found,
                move_with_matching_if_version_moves,
                move_with_stale_if_version_is_version_mismatch,
                moved_file_is_newer_than_anything_once_at_the_destination,
            }
            list {
                shallow_listing_is_sorted_bytewise,
                depth_two_includes_grandchildren_in_path_order,
                a_page_starts_after_its_cursor_in_path_order,
                entries_carry_metadata,
                empty_root_lists_nothing,
                missing_directory_is_file_not_found,
                listing_a_file_is_not_a_directory,
            }
            glob {
                star_stays_inside_one_segment,
                double_star_spans_segments_including_none,
                braces_match_alternatives,
                brackets_match_a_character_class,
                base_path_restricts_and_paths_stay_workspace_relative,
                missing_base_matches_nothing,
                max_results_truncates_in_sorted_order,
                exactly_max_results_is_not_truncated,
                bad_pattern_is_invalid_pattern,
            }
            grep {
                matches_come_in_path_then_line_order,
                match_carries_line_and_byte_offsets_of_the_first_match,
                case_insensitive_matches_any_case,
                fixed_string_treats_metacharacters_literally,
                glob_filters_files,
                context_lines_surround_a_match,
                context_lines_stop_at_the_file_edges,
                no_context_by_default,
                files_with_a_nul_byte_are_skipped,
                a_nul_byte_far_into_a_file_still_skips_it,
                a_utf16_file_with_a_byte_order_mark_is_binary_too,
                a_file_with_an_overlong_line_is_skipped,
                long_lines_are_cut_and_offsets_clamped,
                context_lines_over_the_cap_are_invalid_argument,
                an_overlong_pattern_is_invalid_pattern,
                many_matches_keep_their_lines_and_context,
                wide_context_of_long_lines_is_complete,
                max_matches_truncates_in_order,
                summary_counts_files_searched_and_matches,
                invalid_regex_is_invalid_pattern,
                invalid_glob_is_invalid_pattern,
                base_path_restricts_the_search,
                glob_is_relative_to_the_base,
            }
            stat {
                file_metadata,
                directory_metadata,
                root_is_a_directory,
                rewrite_updates_size_version_and_keeps_time_order,
                missing_path_is_file_not_found,
                exists_names_the_kind,
                exists_of_a_missing_path_is_none,
            }
            concurrency {
                concurrent_overwrites_are_read_whole,
            }
            patch {
                a_range_is_written_and_the_rest_kept,
                ranges_apply_in_order_and_a_later_one_wins,
                writing_past_the_end_extends_with_zeros,
                truncate_to_cuts_the_file,
                truncate_to_extends_with_zeros,
                truncate_to_applies_before_the_ranges,
                an_empty_patch_is_a_new_version_of_the_same_bytes,
                a_small_change_to_a_large_file_keeps_every_other_byte,
                the_files_bits_are_kept_unless_named,
                modified_at_is_set_when_asked,
                a_whole_rewrite_replaces_every_byte_and_keeps_the_bits,
                a_range_from_the_start_keeps_the_tail_it_does_not_reach,
                a_whole_rewrite_of_a_removed_file_is_file_not_found,
                a_whole_rewrite_over_a_stale_version_changes_nothing,
                a_missing_file_is_file_not_found_and_nothing_is_made,
                create_missing_makes_an_empty_file_and_its_parents,
                create_missing_without_create_parents_needs_the_parent,
                a_directory_is_is_a_directory,
                the_root_is_invalid_argument,
                stale_if_version_is_version_mismatch_and_changes_nothing,
                matching_if_version_patches,
                if_version_zero_with_create_missing_creates_only_a_new_file,
                a_broken_stream_leaves_the_file_as_it_was,
                bytes_over_the_write_limit_are_too_large,
                growing_the_file_past_the_write_limit_is_too_large,
                a_range_past_the_largest_offset_is_invalid_argument,
                an_open_stream_keeps_reading_the_old_version,
            }
            symlinks {
                a_link_is_made_and_read_as_a_link,
                files_and_directories_have_no_target,
                any_target_is_stored_verbatim,
                a_target_of_the_longest_length_is_kept,
                bad_targets_are_invalid_argument_and_make_nothing,
                anything_already_there_is_already_exists,
                without_create_parents_a_missing_parent_is_file_not_found,
                reading_a_link_is_permission_denied,
                writing_to_a_link_is_permission_denied_and_changes_nothing,
                a_path_through_a_link_is_permission_denied,
                deleting_a_link_removes_the_link_only,
                move_and_copy_carry_the_link_itself,
                mkdir_over_a_link_is_already_exists,
                glob_and_grep_skip_links,
            }
            attributes {
                new_files_and_directories_get_the_defaults,
                write_write_bytes_and_mkdir_set_the_bits_asked_for,
                overwrite_append_and_edit_keep_the_bits,
                overwrite_with_bits_changes_them,
                an_existing_directory_keeps_its_bits,
                listing_reports_the_bits,
                set_attributes_changes_the_bits_with_a_new_version,
                set_attributes_sets_the_modification_time,
                set_attributes_works_on_directories,
                set_attributes_with_matching_if_version_applies,
                set_attributes_with_stale_if_version_is_version_mismatch,
                set_attributes_of_a_missing_path_is_file_not_found,
                set_attributes_with_nothing_to_set_is_invalid_argument,
                write_bytes_sets_the_modification_time_asked_for,
                copy_and_move_keep_the_bits_and_move_keeps_the_time,
            }
        }
    };
    (@names () $($module:ident { $($case:ident),* $(,)? })*) => {
        &[$($(concat!(stringify!($module), "::", stringify!($case)),)*)*]
    };
    (@tests ($factory:expr) $($module:ident { $($case:ident),* $(,)? })*) => {
        $(
            mod $module {
                #[allow(unused_imports)]
                use super::*;
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $case() {
                        let fixture = $factory.await;
                        $crate::conformance::$module::$case(&*fixture).await;
                    }
                )*
            }
        )*
    };
    ($factory:expr) => {
        $crate::conformance_suite!(@cases tests ($factory));
    };
}

/// Every case name, `module::case`, in suite order.
pub const CASES: &[&str] = conformance_suite!(@names);

#[cfg(test)]
mod tests {
    use super::CASES;

    /// The sources of the case modules, to find their `pub async fn`s.
    const SOURCES: &[(&str, &str)] = &[
        ("attributes", include_str!("attributes.rs")),
        ("concurrency", include_str!("concurrency.rs")),
        ("delete", include_str!("delete.rs")),
        ("edit", include_str!("edit.rs")),
        ("glob", include_str!("glob.rs")),
        ("grep", include_str!("grep.rs")),
        ("list", include_str!("list.rs")),
        ("mkdir", include_str!("mkdir.rs")),
        ("patch", include_str!("patch.rs")),
        ("read", include_str!("read.rs")),
        ("read_bytes", include_str!("read_bytes.rs")),
        ("stat", include_str!("stat.rs")),
        ("symlinks", include_str!("symlinks.rs")),
        ("transfer", include_str!("transfer.rs")),
        ("write", include_str!("write.rs")),
        ("write_bytes", include_str!("write_bytes.rs")),
    ];

    #[test]
    fn every_case_function_is_in_the_suite() {
        let mut missing = Vec::new();
        for (module, source) in SOURCES {
            for rest in source.split("\npub async fn ").skip(1) {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                let full = format!("{module}::{name}");
                if !CASES.contains(&full.as_str()) {
                    missing.push(full);
                }
            }
        }
        assert!(missing.is_empty(), "not in conformance_suite!: {missing:?}");
    }

    #[test]
    fn case_names_are_unique() {
        let mut names = CASES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CASES.len());
    }
}
